#include "kernels/gemm.hpp"

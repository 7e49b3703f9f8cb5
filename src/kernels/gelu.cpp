#include "kernels/gelu.hpp"

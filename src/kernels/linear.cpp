#include "kernels/linear.hpp"

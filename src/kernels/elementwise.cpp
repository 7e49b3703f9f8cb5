#include "kernels/elementwise.hpp"

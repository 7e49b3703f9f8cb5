#include "kernels/cross_entropy.hpp"

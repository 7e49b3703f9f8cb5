#include "kernels/layer_norm.hpp"

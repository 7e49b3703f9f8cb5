#include "kernels/attention.hpp"

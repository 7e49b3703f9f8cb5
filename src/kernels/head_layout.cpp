#include "kernels/head_layout.hpp"

#include "kernels/embedding.hpp"

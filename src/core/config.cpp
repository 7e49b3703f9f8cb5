#include "core/config.hpp"

#include "core/command_line.hpp"

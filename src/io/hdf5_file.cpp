#include "io/hdf5_file.hpp"

#pragma once
// The run's output files, checked before any work: a run whose output cannot
// be written, or would destroy another file, is refused with exit 2 instead of
// failing, or doing the damage, after its training.
#include "core/config.hpp"

namespace miniattn {

// Throws InputError naming the key when an output path (io.snapshot,
// io.checkpoint, run.result; run.machine in calibrate mode) lies in a
// directory that does not exist or is not writable; is a directory, or a file
// that is not a regular one (a device such as /dev/null, which the rename
// that commits an output would replace); or is the path of another output, of
// the deck or of a file the run reads (io.init, io.restart; run.machine in
// predict mode). io.checkpoint may be io.restart: a run that goes on from its
// checkpoint replaces it in one rename.
void check_output_paths(const Config& config);

}  // namespace miniattn

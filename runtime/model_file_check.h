// Checks on a model file before LibTorch parses it: LibTorch assumes a well-formed archive, so a
// damaged one is found here and described, rather than met as a crash or an obscure error.
#pragma once

#include <stdexcept>
#include <string>

namespace lightweight_dispatch {

class ModelFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ModelFileError naming what is wrong: no such file, unreadable, empty, not a zip archive,
// an archive whose directory or records are damaged (every stored record's CRC-32 is verified, which
// LibTorch's reader does not do), or one
// without lite-interpreter bytecode. A flatbuffer model is passed through unchecked.
void check_model_file(const std::string& path);

} // namespace lightweight_dispatch

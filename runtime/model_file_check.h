// Checks on a model file before LibTorch parses it: LibTorch assumes a well-formed archive, so a
// damaged one is found here and described, rather than met as a crash or an obscure error.
#pragma once

#include <istream>
#include <memory>
#include <stdexcept>
#include <string>

namespace lightweight_dispatch {

class ModelFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Which of a zip model's records LibTorch's loader is to read.
enum class DebugRecords {
  // Every record, as the file is: the stock interpreter symbolicates its errors from the debug records
  // (code/*.debug_pkl, callstack_debug_map.pkl).
  Read,
  // All but the debug records and the model's source (the records under code/ and callstack_debug_map.pkl),
  // for the lightweight interpreter, which never looks at them: the loader's debug table (EfficientNet-B0
  // saved unfrozen: 276 deflated records, 31M instructions) is not built, and the check need not inflate them.
  Skipped,
};

// A model file that passed the checks, as LibTorch's loader is to read it.
class CheckedModelFile {
 public:
  class Archive; // the file mapped, its central directory rewritten without the skipped records

  CheckedModelFile();
  explicit CheckedModelFile(std::shared_ptr<const Archive> archive);
  ~CheckedModelFile();

  // A stream over the archive the loader reads (the file mapped, without the skipped records), or null when the
  // loader is to read the file itself: DebugRecords::Read, a flatbuffer model, or a zip64 archive.
  std::unique_ptr<std::istream> open() const;

 private:
  std::shared_ptr<const Archive> archive_;
};

// Throws ModelFileError naming what is wrong: no such file, unreadable, empty, not a zip archive,
// an archive whose directory or records are damaged (the CRC-32 of every record the loader is to read is
// verified, which LibTorch's reader does not do), or one without lite-interpreter bytecode. A flatbuffer model
// is passed through unchecked.
CheckedModelFile check_model_file(const std::string& path, DebugRecords debug_records);

} // namespace lightweight_dispatch

#include <lite_predictor/model_file_check.h>

#include <caffe2/serialize/inline_container.h>

#include <array>
#include <filesystem>
#include <fstream>

namespace lightweight_dispatch {

namespace {

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first 8 bytes: a zip starts with "PK\3\4"; a flatbuffer model has "PTMF" at offset 4.
std::array<char, 8> read_magic(const std::string& path, std::uintmax_t size) {
  std::array<char, 8> magic{};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ModelFileError(path + ": cannot open the file for reading");
  }
  in.read(magic.data(), static_cast<std::streamsize>(std::min<std::uintmax_t>(size, magic.size())));
  return magic;
}

} // namespace

void check_model_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    throw ModelFileError(path + ": no such model file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw ModelFileError(path + ": not a regular file");
  }
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) {
    throw ModelFileError(path + ": cannot read the file size");
  }
  if (size == 0) {
    throw ModelFileError(path + ": the file is empty");
  }
  const auto magic = read_magic(path, size);
  if (size >= 8 && std::string(magic.data() + 4, 4) == "PTMF") {
    return;
  }
  if (size < 22 || std::string(magic.data(), 4) != std::string("PK\x03\x04", 4)) {
    throw ModelFileError(path + ": not a lite-interpreter model (not a zip archive)");
  }
  bool has_bytecode = false;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    for (const std::string& record : reader.getAllRecords()) {
      // Reading a record verifies its CRC-32 against the archive directory.
      reader.getRecord(record);
      has_bytecode = has_bytecode || record == "bytecode.pkl" || ends_with(record, "/bytecode.pkl");
    }
  } catch (const std::exception& e) {
    throw ModelFileError(path + ": damaged archive (truncated or corrupted): " + first_line(e.what()));
  }
  if (!has_bytecode) {
    throw ModelFileError(
        path + ": no lite-interpreter bytecode in the archive (save with _save_for_lite_interpreter, "
               "not torch.jit.save)");
  }
}

} // namespace lightweight_dispatch

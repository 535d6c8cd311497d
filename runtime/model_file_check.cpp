#include <runtime/model_file_check.h>
#include <lightweight_dispatch/values.h>

#include <runtime/crc32.h>

#include <caffe2/serialize/inline_container.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <tuple>
#include <vector>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

// The model file mapped read-only: the check reads every byte once, straight from the page cache,
// with no buffer to allocate, fault in and fill (for MobileNetV2's 14 MB that was most of the check's time).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw ModelFileError(path + ": cannot open the file for reading");
    }
    struct stat status {};
    if (fstat(fd, &status) != 0 || status.st_size <= 0) {
      close(fd);
      throw ModelFileError(path + ": cannot read the file");
    }
    size_ = static_cast<size_t>(status.st_size);
    void* mapped = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (mapped == MAP_FAILED) {
      throw ModelFileError(path + ": cannot read the file");
    }
    data_ = static_cast<const unsigned char*>(mapped);
  }
  ~MappedFile() {
    munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const {
    return data_;
  }
  size_t size() const {
    return size_;
  }
  const unsigned char& operator[](size_t at) const {
    return data_[at];
  }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

uint32_t le32(const MappedFile& b, size_t at) {
  return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
}

uint16_t le16(const MappedFile& b, size_t at) {
  return static_cast<uint16_t>(b[at] | (b[at + 1] << 8));
}

// A deflated record, whose CRC-32 covers its inflated bytes: checked once the reader can inflate it.
struct DeflatedRecord {
  std::string name; // as the zip names it: "archive/code/....debug_pkl"
  uint32_t expected_crc;
};

// Deflate cannot expand data by more than about 1032:1; a directory entry claiming more is damaged,
// and believing it would have the reader allocate up to 4 GB.
constexpr uint64_t kMaxDeflateRatio = 1032;

// LibTorch's zip reader skips CRC checks (miniz is built without them), so a flipped byte inside a
// record would reach the unpickler (a flipped byte in a deflated debug record once had it allocate
// 20 GB). Walk the central directory and verify every stored record's CRC-32 here; return the
// deflated ones (torch compresses its debug records) for checking after inflation. Zip64 archives are
// left to the reader.
std::vector<DeflatedRecord> verify_record_checksums(const std::string& path) {
  const MappedFile bytes(path);
  const size_t size = bytes.size();
  // The end-of-directory record sits in the last 22 bytes plus up to 65535 bytes of comment.
  const size_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  size_t eocd = std::string::npos;
  for (size_t i = size - 22 + 1; size >= 22 && i-- > lowest;) {
    if (le32(bytes, i) == 0x06054b50u) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) {
    throw ModelFileError(path + ": damaged archive (truncated or corrupted): no end-of-directory record");
  }
  const uint16_t entries = le16(bytes, eocd + 10);
  const uint32_t directory_offset = le32(bytes, eocd + 16);
  std::vector<DeflatedRecord> deflated;
  if (entries == 0xFFFF || directory_offset == 0xFFFFFFFFu) {
    return deflated; // zip64: leave it to the reader
  }
  size_t at = directory_offset;
  for (uint16_t n = 0; n < entries; ++n) {
    if (at + 46 > size || le32(bytes, at) != 0x02014b50u) {
      throw ModelFileError(path + ": damaged archive (truncated or corrupted): bad directory entry");
    }
    const uint16_t method = le16(bytes, at + 10);
    const uint32_t expected_crc = le32(bytes, at + 16);
    const uint32_t stored_size = le32(bytes, at + 20);
    const uint32_t inflated_size = le32(bytes, at + 24);
    const uint16_t name_length = le16(bytes, at + 28);
    const uint16_t extra_length = le16(bytes, at + 30);
    const uint16_t comment_length = le16(bytes, at + 32);
    const uint32_t local = le32(bytes, at + 42);
    if (at + 46 + name_length > size) {
      throw ModelFileError(path + ": damaged archive (truncated or corrupted): bad directory entry");
    }
    const std::string name(reinterpret_cast<const char*>(bytes.data()) + at + 46, name_length);
    at += 46 + name_length + extra_length + comment_length;
    if (stored_size == 0xFFFFFFFFu || inflated_size == 0xFFFFFFFFu || local == 0xFFFFFFFFu) {
      continue;
    }
    if (method == 8) {
      if (inflated_size > kMaxDeflateRatio * stored_size + 64) {
        throw ModelFileError(
            path + ": damaged archive (truncated or corrupted): record " + name + " claims an impossible size");
      }
      deflated.push_back({name, expected_crc});
      continue;
    }
    if (method != 0) {
      continue;
    }
    if (static_cast<size_t>(local) + 30 > size || le32(bytes, local) != 0x04034b50u) {
      throw ModelFileError(path + ": damaged archive (truncated or corrupted): record " + name + " is missing");
    }
    const size_t data = local + 30 + le16(bytes, local + 26) + le16(bytes, local + 28);
    if (data + stored_size > size) {
      throw ModelFileError(path + ": damaged archive (truncated or corrupted): record " + name + " is cut short");
    }
    if (crc32(bytes.data() + data, stored_size) != expected_crc) {
      throw ModelFileError(
          path + ": damaged archive (truncated or corrupted): record " + name + " fails its CRC-32 check");
    }
  }
  return deflated;
}

// The reader names records without the archive's top-level folder ("archive/").
std::string reader_record_name(const std::string& zip_name) {
  const size_t slash = zip_name.find('/');
  return slash == std::string::npos ? zip_name : zip_name.substr(slash + 1);
}

void verify_inflated_checksums(
    const std::string& path, caffe2::serialize::PyTorchStreamReader& reader, const std::vector<DeflatedRecord>& records) {
  for (const DeflatedRecord& record : records) {
    const std::string damaged = path + ": damaged archive (truncated or corrupted): record " + record.name;
    at::DataPtr data;
    size_t size = 0;
    try {
      std::tie(data, size) = reader.getRecord(reader_record_name(record.name));
    } catch (const std::exception&) {
      // A damaged deflate stream usually fails to inflate (or inflates to the wrong size) before its
      // checksum can be compared.
      throw ModelFileError(damaged + " cannot be inflated");
    }
    if (crc32(static_cast<const unsigned char*>(data.get()), size) != record.expected_crc) {
      throw ModelFileError(damaged + " fails its CRC-32 check");
    }
  }
}

} // namespace

std::string printable_first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  for (char& c : line) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) {
      c = '?';
    }
  }
  return line;
}

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
  const std::vector<DeflatedRecord> deflated = verify_record_checksums(path);
  bool has_bytecode = false;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    // Record bounds and checksums were verified above; the reader's own directory parse must succeed too.
    for (const std::string& record : reader.getAllRecords()) {
      has_bytecode = has_bytecode || record == "bytecode.pkl" || ends_with(record, "/bytecode.pkl");
    }
    verify_inflated_checksums(path, reader, deflated);
  } catch (const ModelFileError&) {
    throw;
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

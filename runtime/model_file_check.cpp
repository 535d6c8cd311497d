#include <runtime/model_file_check.h>
#include <lightweight_dispatch/values.h>

#include <runtime/crc32.h>

#include <caffe2/serialize/inline_container.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <streambuf>
#include <tuple>
#include <vector>

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

// The model file mapped: the check reads every byte once, straight from the page cache, with no buffer to
// allocate, fault in and fill (for MobileNetV2's 14 MB that was most of the check's time), and LibTorch's loader
// reads the same pages. Private and read-only but for the pages of a rewritten central directory, which get
// copies of their own (rewrite_tail).
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
    data_ = static_cast<unsigned char*>(mapped);
  }
  ~MappedFile() {
    munmap(data_, size_);
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

  // `tail` written over the bytes from `at` on (it must fit before the end), in this process's copy only.
  bool rewrite_tail(size_t at, const std::string& tail) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t first_page = at / page * page;
    if (at + tail.size() > size_ ||
        mprotect(data_ + first_page, size_ - first_page, PROT_READ | PROT_WRITE) != 0) {
      return false;
    }
    std::memcpy(data_ + at, tail.data(), tail.size());
    return mprotect(data_ + first_page, size_ - first_page, PROT_READ) == 0;
  }

 private:
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

uint32_t le32(const MappedFile& b, size_t at) {
  return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
}

uint16_t le16(const MappedFile& b, size_t at) {
  return static_cast<uint16_t>(b[at] | (b[at + 1] << 8));
}

void put_le32(std::string& to, uint32_t value) {
  for (int byte = 0; byte < 4; ++byte) {
    to.push_back(static_cast<char>((value >> (8 * byte)) & 0xFF));
  }
}

void put_le16(std::string& to, uint16_t value) {
  to.push_back(static_cast<char>(value & 0xFF));
  to.push_back(static_cast<char>(value >> 8));
}

// One record as the central directory describes it.
struct DirectoryEntry {
  std::string name; // as the zip names it: "archive/code/....debug_pkl"
  uint16_t method = 0;
  uint32_t expected_crc = 0;
  uint32_t stored_size = 0;
  uint32_t inflated_size = 0;
  uint32_t local_header = 0;
  size_t entry_begin = 0, entry_end = 0; // the entry's own bytes in the central directory
};

struct ArchiveDirectory {
  size_t offset = 0; // where the central directory starts
  std::vector<DirectoryEntry> entries;
  bool zip64 = false; // left to the reader: no entries read
};

// Deflate cannot expand data by more than about 1032:1; a directory entry claiming more is damaged,
// and believing it would have the reader allocate up to 4 GB.
constexpr uint64_t kMaxDeflateRatio = 1032;

std::string damaged(const std::string& path) {
  return path + ": damaged archive (truncated or corrupted): ";
}

// The central directory's entries, each checked to lie inside the file.
ArchiveDirectory read_directory(const MappedFile& bytes, const std::string& path) {
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
    throw ModelFileError(damaged(path) + "no end-of-directory record");
  }
  ArchiveDirectory directory;
  const uint16_t entries = le16(bytes, eocd + 10);
  directory.offset = le32(bytes, eocd + 16);
  if (entries == 0xFFFF || directory.offset == 0xFFFFFFFFu) {
    directory.zip64 = true;
    return directory;
  }
  directory.entries.reserve(entries);
  size_t at = directory.offset;
  for (uint16_t n = 0; n < entries; ++n) {
    if (at + 46 > size || le32(bytes, at) != 0x02014b50u) {
      throw ModelFileError(damaged(path) + "bad directory entry");
    }
    DirectoryEntry entry;
    entry.method = le16(bytes, at + 10);
    entry.expected_crc = le32(bytes, at + 16);
    entry.stored_size = le32(bytes, at + 20);
    entry.inflated_size = le32(bytes, at + 24);
    const uint16_t name_length = le16(bytes, at + 28);
    const uint16_t extra_length = le16(bytes, at + 30);
    const uint16_t comment_length = le16(bytes, at + 32);
    entry.local_header = le32(bytes, at + 42);
    const size_t end = at + 46 + name_length + extra_length + comment_length;
    if (end > size) {
      throw ModelFileError(damaged(path) + "bad directory entry");
    }
    entry.name.assign(reinterpret_cast<const char*>(bytes.data()) + at + 46, name_length);
    entry.entry_begin = at;
    entry.entry_end = end;
    directory.entries.push_back(std::move(entry));
    at = end;
  }
  return directory;
}

// The reader names records without the archive's top-level folder ("archive/").
std::string reader_record_name(const std::string& zip_name) {
  const size_t slash = zip_name.find('/');
  return slash == std::string::npos ? zip_name : zip_name.substr(slash + 1);
}

// A record only the stock interpreter's error messages read (the debug ranges and call stacks), or the model's
// source, which no lite-interpreter loader reads.
bool is_debug_record(const std::string& zip_name) {
  const std::string name = reader_record_name(zip_name);
  return name.rfind("code/", 0) == 0 || name == "callstack_debug_map.pkl";
}

// LibTorch's zip reader skips CRC checks (miniz is built without them), so a flipped byte inside a
// record would reach the unpickler (a flipped byte in a deflated debug record once had it allocate
// 20 GB). Verify the CRC-32 of every stored record in `entries` here; return the deflated ones (torch
// compresses its debug records), whose CRC-32 covers their inflated bytes, for checking once the reader inflates
// them.
std::vector<DirectoryEntry> verify_record_checksums(
    const MappedFile& bytes, const std::vector<DirectoryEntry>& entries, const std::string& path) {
  const size_t size = bytes.size();
  std::vector<DirectoryEntry> deflated;
  for (const DirectoryEntry& entry : entries) {
    const std::string& name = entry.name;
    if (entry.stored_size == 0xFFFFFFFFu || entry.inflated_size == 0xFFFFFFFFu || entry.local_header == 0xFFFFFFFFu) {
      continue;
    }
    if (entry.method == 8) {
      if (entry.inflated_size > kMaxDeflateRatio * entry.stored_size + 64) {
        throw ModelFileError(damaged(path) + "record " + name + " claims an impossible size");
      }
      deflated.push_back(entry);
      continue;
    }
    if (entry.method != 0) {
      continue;
    }
    const size_t local = entry.local_header;
    if (local + 30 > size || le32(bytes, local) != 0x04034b50u) {
      throw ModelFileError(damaged(path) + "record " + name + " is missing");
    }
    const size_t data = local + 30 + le16(bytes, local + 26) + le16(bytes, local + 28);
    if (data + entry.stored_size > size) {
      throw ModelFileError(damaged(path) + "record " + name + " is cut short");
    }
    if (crc32(bytes.data() + data, entry.stored_size) != entry.expected_crc) {
      throw ModelFileError(damaged(path) + "record " + name + " fails its CRC-32 check");
    }
  }
  return deflated;
}

void verify_inflated_checksums(
    const std::string& path, caffe2::serialize::PyTorchStreamReader& reader, const std::vector<DirectoryEntry>& records) {
  for (const DirectoryEntry& record : records) {
    const std::string record_is = damaged(path) + "record " + record.name;
    at::DataPtr data;
    size_t size = 0;
    try {
      std::tie(data, size) = reader.getRecord(reader_record_name(record.name));
    } catch (const std::exception&) {
      // A damaged deflate stream usually fails to inflate (or inflates to the wrong size) before its
      // checksum can be compared.
      throw ModelFileError(record_is + " cannot be inflated");
    }
    if (crc32(static_cast<const unsigned char*>(data.get()), size) != record.expected_crc) {
      throw ModelFileError(record_is + " fails its CRC-32 check");
    }
  }
}

// The central directory of `kept` entries, then an end-of-directory record for them placed at `offset`.
std::string directory_of(const MappedFile& bytes, const std::vector<DirectoryEntry>& kept, size_t offset) {
  std::string tail;
  for (const DirectoryEntry& entry : kept) {
    tail.append(reinterpret_cast<const char*>(bytes.data()) + entry.entry_begin, entry.entry_end - entry.entry_begin);
  }
  const auto count = static_cast<uint16_t>(kept.size());
  const auto directory_size = static_cast<uint32_t>(tail.size());
  put_le32(tail, 0x06054b50u);
  put_le16(tail, 0); // this disk
  put_le16(tail, 0); // the disk the directory starts on
  put_le16(tail, count);
  put_le16(tail, count);
  put_le32(tail, directory_size);
  put_le32(tail, static_cast<uint32_t>(offset));
  put_le16(tail, 0); // no comment
  return tail;
}

// Reads a span of memory as a seekable stream (what LibTorch's IStreamAdapter needs: seekg, tellg, read).
class MemoryStreamBuffer : public std::streambuf {
 public:
  MemoryStreamBuffer(const unsigned char* data, size_t size) {
    char* begin = const_cast<char*>(reinterpret_cast<const char*>(data)); // only ever read
    setg(begin, begin, begin + size);
  }

 protected:
  pos_type seekoff(off_type offset, std::ios_base::seekdir from, std::ios_base::openmode which) override {
    if ((which & std::ios_base::in) == 0) {
      return pos_type(off_type(-1));
    }
    const off_type base = from == std::ios_base::beg ? 0 : from == std::ios_base::cur ? gptr() - eback() : egptr() - eback();
    const off_type target = base + offset;
    if (target < 0 || target > egptr() - eback()) {
      return pos_type(off_type(-1));
    }
    setg(eback(), eback() + target, egptr());
    return pos_type(target);
  }
  pos_type seekpos(pos_type position, std::ios_base::openmode which) override {
    return seekoff(off_type(position), std::ios_base::beg, which);
  }
};

} // namespace

// The model file mapped with its central directory rewritten to list only the records the loader is to read:
// every record stays where it was, so the local headers and the data the kept entries point at are the file's.
class CheckedModelFile::Archive {
 public:
  Archive(std::unique_ptr<MappedFile> file, size_t size) : file_(std::move(file)), size_(size) {}
  const unsigned char* data() const {
    return file_->data();
  }
  size_t size() const {
    return size_;
  }

 private:
  std::unique_ptr<MappedFile> file_;
  size_t size_; // up to the rewritten end-of-directory record
};

namespace {

// A stream over the archive, which it keeps mapped while it is read.
class ArchiveStream : public std::istream {
 public:
  explicit ArchiveStream(std::shared_ptr<const CheckedModelFile::Archive> archive)
      : std::istream(nullptr), archive_(std::move(archive)), buffer_(archive_->data(), archive_->size()) {
    rdbuf(&buffer_);
  }

 private:
  std::shared_ptr<const CheckedModelFile::Archive> archive_;
  MemoryStreamBuffer buffer_;
};

} // namespace

CheckedModelFile::CheckedModelFile() = default;
CheckedModelFile::CheckedModelFile(std::shared_ptr<const Archive> archive) : archive_(std::move(archive)) {}
CheckedModelFile::~CheckedModelFile() = default;

std::unique_ptr<std::istream> CheckedModelFile::open() const {
  if (!archive_) {
    return nullptr;
  }
  return std::make_unique<ArchiveStream>(archive_);
}

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

CheckedModelFile check_model_file(const std::string& path, DebugRecords debug_records) {
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
    return CheckedModelFile();
  }
  if (size < 22 || std::string(magic.data(), 4) != std::string("PK\x03\x04", 4)) {
    throw ModelFileError(path + ": not a lite-interpreter model (not a zip archive)");
  }
  auto bytes = std::make_unique<MappedFile>(path);
  const ArchiveDirectory directory = read_directory(*bytes, path);
  // What the loader reads: the file as it is (by its path), or the records it is to read, in the mapped file
  // with a central directory listing only them (the skipped ones' bytes stay, unlisted: nothing reads them).
  std::vector<DirectoryEntry> read;
  for (const DirectoryEntry& entry : directory.entries) {
    if (debug_records == DebugRecords::Read || !is_debug_record(entry.name)) {
      read.push_back(entry);
    }
  }
  const std::vector<DirectoryEntry> deflated = verify_record_checksums(*bytes, read, path);
  std::shared_ptr<const CheckedModelFile::Archive> archive;
  if (debug_records == DebugRecords::Skipped && !directory.zip64) {
    const std::string tail = directory_of(*bytes, read, directory.offset);
    if (!bytes->rewrite_tail(directory.offset, tail)) {
      throw ModelFileError(path + ": cannot read the file");
    }
    archive = std::make_shared<const CheckedModelFile::Archive>(std::move(bytes), directory.offset + tail.size());
  }
  CheckedModelFile checked(archive);
  bool has_bytecode = false;
  try {
    const std::unique_ptr<std::istream> stream = checked.open();
    auto reader = stream ? std::make_unique<caffe2::serialize::PyTorchStreamReader>(stream.get())
                         : std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    // Record bounds and checksums were verified above; the reader's own directory parse must succeed too.
    for (const std::string& record : reader->getAllRecords()) {
      has_bytecode = has_bytecode || record == "bytecode.pkl" || ends_with(record, "/bytecode.pkl");
    }
    verify_inflated_checksums(path, *reader, deflated);
  } catch (const ModelFileError&) {
    throw;
  } catch (const std::exception& e) {
    throw ModelFileError(damaged(path) + first_line(e.what()));
  }
  if (!has_bytecode) {
    throw ModelFileError(
        path + ": no lite-interpreter bytecode in the archive (save with _save_for_lite_interpreter, "
               "not torch.jit.save)");
  }
  return checked;
}

} // namespace lightweight_dispatch

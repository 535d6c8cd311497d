// kernel_check OP ARGS.pt OUT.pt: runs one of the torchvision kernels on arguments saved from Python, so the
// tests can compare it with the Python reference.
//
// ARGS.pt is `torch.save([...])` of the op's arguments in schema order, with non-tensor arguments as 0-dim
// tensors (float -> float64, int -> int64, bool -> bool). OUT.pt receives the op's outputs as a tuple of
// tensors for `torch.load` (see save_tensors). Exit status: 0 on success; 1 with a message on stderr when the
// arguments or the kernel's own checks fail; 2 on bad usage.
#include <lightweight_dispatch/torchvision_kernels.h>

#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace custom = lightweight_dispatch::custom;
using Outputs = std::vector<at::Tensor>;

// The op's arguments, read by position; a wrong kind of argument is reported by op and argument name.
class Arguments {
 public:
  Arguments(std::string op, std::vector<std::string> names, std::vector<at::Tensor> values)
      : op_(std::move(op)), names_(std::move(names)), values_(std::move(values)) {
    if (values_.size() != names_.size()) {
      throw std::runtime_error(op_ + " takes " + std::to_string(names_.size()) + " arguments, got " +
                               std::to_string(values_.size()));
    }
  }

  const at::Tensor& tensor(size_t i) const { return values_[i]; }
  double real(size_t i) const { return scalar(i, "float64", at::isFloatingType).item<double>(); }
  int64_t integer(size_t i) const {
    return scalar(i, "int64", [](at::ScalarType t) { return at::isIntegralType(t, /*includeBool=*/false); })
        .item<int64_t>();
  }
  bool flag(size_t i) const {
    return scalar(i, "bool", [](at::ScalarType t) { return t == at::kBool; }).item<bool>();
  }

 private:
  template <typename Accepts>
  const at::Tensor& scalar(size_t i, const char* kind, Accepts accepts) const {
    const at::Tensor& value = values_[i];
    if (value.dim() != 0 || !accepts(value.scalar_type())) {
      throw std::runtime_error(op_ + ": argument " + std::to_string(i) + " (" + names_[i] + ") must be a 0-dim " +
                               kind + " tensor, got a " + std::to_string(value.dim()) + "-dim " +
                               std::string(c10::toString(value.scalar_type())) + " tensor");
    }
    return value;
  }

  std::string op_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> values_;
};

struct Op {
  std::vector<std::string> argument_names;  // schema order
  std::function<Outputs(const Arguments&)> run;
};

Outputs pair(const std::tuple<at::Tensor, at::Tensor>& result) {
  return {std::get<0>(result), std::get<1>(result)};
}

const std::map<std::string, Op>& ops() {
  static const std::map<std::string, Op> table = {
      {"nms",
       {{"dets", "scores", "iou_threshold"},
        [](const Arguments& a) { return Outputs{custom::nms(a.tensor(0), a.tensor(1), a.real(2))}; }}},
      {"roi_align",
       {{"input", "rois", "spatial_scale", "pooled_height", "pooled_width", "sampling_ratio", "aligned"},
        [](const Arguments& a) {
          return Outputs{custom::roi_align(a.tensor(0), a.tensor(1), a.real(2), a.integer(3), a.integer(4),
                                           a.integer(5), a.flag(6))};
        }}},
      {"roi_pool",
       {{"input", "rois", "spatial_scale", "pooled_height", "pooled_width"},
        [](const Arguments& a) {
          return pair(custom::roi_pool(a.tensor(0), a.tensor(1), a.real(2), a.integer(3), a.integer(4)));
        }}},
      {"ps_roi_align",
       {{"input", "rois", "spatial_scale", "pooled_height", "pooled_width", "sampling_ratio"},
        [](const Arguments& a) {
          return pair(
              custom::ps_roi_align(a.tensor(0), a.tensor(1), a.real(2), a.integer(3), a.integer(4), a.integer(5)));
        }}},
      {"ps_roi_pool",
       {{"input", "rois", "spatial_scale", "pooled_height", "pooled_width"},
        [](const Arguments& a) {
          return pair(custom::ps_roi_pool(a.tensor(0), a.tensor(1), a.real(2), a.integer(3), a.integer(4)));
        }}},
      {"deform_conv2d",
       {{"input", "weight", "offset", "mask", "bias", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h",
         "dilation_w", "groups", "offset_groups", "use_mask"},
        [](const Arguments& a) {
          return Outputs{custom::deform_conv2d(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4),
                                               a.integer(5), a.integer(6), a.integer(7), a.integer(8),
                                               a.integer(9), a.integer(10), a.integer(11), a.integer(12),
                                               a.flag(13))};
        }}},
  };
  return table;
}

std::vector<at::Tensor> load_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(path + ": cannot open the file");
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const c10::IValue value = torch::jit::pickle_load(bytes);
  if (!value.isList()) {
    throw std::runtime_error(path + ": expected torch.save of a list of tensors, found " + value.tagKind());
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& element : value.toListRef()) {
    if (!element.isTensor()) {
      throw std::runtime_error(path + ": every element must be a tensor, found " + element.tagKind());
    }
    tensors.push_back(element.toTensor());
  }
  return tensors;
}

void save_tensors(const std::string& path, const Outputs& tensors) {
  // A tuple, because it pickles as a plain tuple: the pickler writes lists with a type tag
  // (torch.jit._pickle.build_tensorlist or restore_type_tag) that torch.load's default weights_only mode
  // rejects.
  const std::vector<c10::IValue> elements(tensors.begin(), tensors.end());
  const c10::IValue value = c10::ivalue::Tuple::create(elements);
  const std::vector<char> bytes = torch::jit::pickle_save(value);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw std::runtime_error(path + ": cannot write the file");
  }
}

std::string op_names() {
  std::string names;
  for (const auto& entry : ops()) {
    names += (names.empty() ? "" : ", ") + entry.first;
  }
  return names;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: kernel_check OP ARGS.pt OUT.pt   (OP: " << op_names() << ")\n";
    return 2;
  }
  const std::string op_name = argv[1];
  const auto op = ops().find(op_name);
  if (op == ops().end()) {
    std::cerr << "kernel_check: unknown op '" << op_name << "'; known ops: " << op_names() << "\n";
    return 2;
  }
  try {
    const Arguments arguments(op_name, op->second.argument_names, load_tensors(argv[2]));
    save_tensors(argv[3], op->second.run(arguments));
  } catch (const c10::Error& error) {
    // what_without_backtrace: the kernel's message, without the C++ stack trace TORCH_CHECK attaches.
    std::cerr << "kernel_check: " << error.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "kernel_check: " << error.what() << "\n";
    return 1;
  }
  return 0;
}

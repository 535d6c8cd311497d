// embed MODEL.ptl INPUTS.pt: load a lite-interpreter model, run forward on a torch.save'd list of arguments,
// print each output tensor's shape and the time taken. Any failure: its message and exit 1.
#include <lightweight_dispatch/runtime.h>

#include <chrono>
#include <exception>
#include <iomanip>
#include <iostream>

namespace ld = lightweight_dispatch;

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.ptl INPUTS.pt\n";
    return 2;
  }
  try {
    auto start = std::chrono::steady_clock::now();
    const ld::Model model = ld::Model::load(argv[1]); // checks the file, binds every operator
    const double load_ms = ms_since(start);
    const std::vector<c10::IValue> inputs = ld::load_inputs(argv[2], model);

    start = std::chrono::steady_clock::now();
    const c10::IValue output = model.forward(inputs);
    const double forward_ms = ms_since(start);

    const std::vector<at::Tensor> tensors = ld::flatten_outputs(output);
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::cout << "output " << i << ": " << tensors[i].sizes() << " " << tensors[i].scalar_type() << "\n";
    }
    std::cout << std::fixed << std::setprecision(1) << "load " << load_ms << " ms, forward " << forward_ms << " ms\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "embed: " << e.what() << "\n";
    return 1;
  }
}

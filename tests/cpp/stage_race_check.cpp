// Concurrent runs of a model with the bind-time stage never share what they return (tests/test_stage_correctness.py):
//   stage_race_check MODEL.ptl INPUTS_A.pt INPUTS_B.pt [ROUNDS]
// Loads MODEL with the stage and without, and from 4 threads at once runs the stage's model ROUNDS times each
// (default 200), alternating between two inputs of different shapes, so that folded calls keep replacing the
// results they remember while other threads are handed them. Each output must agree within 1e-5 with the
// no-stage model's output for its input, and is then overwritten with NaN, as a caller may do with what it was
// given: a tensor the stage still hands to others would turn up NaN in their outputs. No two outputs, kept
// until the end, may share storage. Prints the counts and "stage_race_check: ok" or the first failure.
#include <lightweight_dispatch/runtime.h>

#include <c10/core/InferenceMode.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ld = lightweight_dispatch;

namespace {

constexpr int kThreads = 4;
constexpr double kTolerance = 1e-5;

struct Failure {
  std::mutex mutex;
  std::string first;
  std::atomic<int> count{0};

  void note(const std::string& what) {
    count.fetch_add(1);
    std::lock_guard<std::mutex> lock(mutex);
    if (first.empty()) {
      first = what;
    }
  }
};

} // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: stage_race_check MODEL.ptl INPUTS_A.pt INPUTS_B.pt [ROUNDS]\n";
    return 2;
  }
  const int rounds = argc == 5 ? std::atoi(argv[4]) : 200;
  try {
    ld::LoadOptions with_stage;
    with_stage.preparation = ld::Preparation::FirstCall;
    ld::LoadOptions without_stage;
    without_stage.specialize = false;
    const ld::Model staged = ld::Model::load(argv[1], with_stage);
    const ld::Model plain = ld::Model::load(argv[1], without_stage);
    const std::vector<std::vector<c10::IValue>> inputs = {ld::load_argument_list(argv[2]), ld::load_argument_list(argv[3])};
    std::vector<std::vector<at::Tensor>> references;
    {
      c10::InferenceMode inference_mode;
      for (const auto& input : inputs) {
        references.push_back(ld::flatten_outputs(plain.forward(input)));
      }
    }

    Failure failure;
    std::vector<std::vector<at::Tensor>> kept(kThreads); // every output, alive until the end
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        c10::InferenceMode inference_mode;
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        for (int round = 0; round < rounds; ++round) {
          const size_t which = static_cast<size_t>((round + t) % 2);
          std::vector<at::Tensor> outputs = ld::flatten_outputs(staged.forward(inputs[which]));
          const ld::Comparison comparison = ld::compare_outputs(outputs, references[which], kTolerance, kTolerance);
          if (!comparison.match) {
            failure.note("thread " + std::to_string(t) + " round " + std::to_string(round) + " input " +
                         std::to_string(which) + ": " + comparison.mismatch);
          }
          for (at::Tensor& output : outputs) {
            output.fill_(NAN); // as a caller may: nobody else may see it
            kept[t].push_back(output);
          }
        }
      });
    }
    for (std::thread& thread : threads) {
      thread.join();
    }

    std::map<const void*, int> owners; // storage -> the thread that was given it
    size_t outputs = 0;
    for (int t = 0; t < kThreads; ++t) {
      for (const at::Tensor& output : kept[t]) {
        ++outputs;
        if (!output.has_storage() || output.numel() == 0) {
          continue;
        }
        const void* storage = output.storage().unsafeGetStorageImpl();
        if (!owners.emplace(storage, t).second) {
          failure.note("two outputs share storage (threads " + std::to_string(owners[storage]) + " and " +
                       std::to_string(t) + ")");
        }
      }
    }
    size_t folded_reused = 0;
    for (const ld::FoldedCallSite& folded : staged.folded_calls()) {
      folded_reused += static_cast<size_t>(folded.reused);
    }
    std::cout << "stage_race_check: " << kThreads << " threads x " << rounds << " runs, " << outputs << " outputs, "
              << staged.folded_calls().size() << " folded calls reused " << folded_reused << " times, "
              << failure.count.load() << " failures\n";
    if (failure.count.load() != 0) {
      std::cout << "stage_race_check: FAIL " << failure.first << "\n";
      return 1;
    }
    std::cout << "stage_race_check: ok\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "stage_race_check: " << e.what() << "\n";
    return 3;
  }
}

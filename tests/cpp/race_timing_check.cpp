// A race is never timed while a preparation run is compiling beside it (tests/test_bind_time_kernels.py):
//   race_timing_check RACED.ptl RACED.inputs.pt BUSY.ptl BUSY.inputs.pt
// At 2 intra-op threads, a background preparation run compiles and checks RACED's one site and leaves its race to
// the caller's next call of that shape. That call is made while BUSY's first background preparation runs (BUSY
// has many sites, slow to compile): the race must wait, and the call runs the generated kernels, leaving no note.
// Once BUSY's preparation is over, the next call races (run with LIGHTWEIGHT_DISPATCH_TEST_ONLY_GENERATED_WINS=1:
// every race is lost, so its note says that it ran and where); a lost race is run once more on the next call
// before it stands, and never a third time. Prints one line per check and
// "race_timing_check: ok", or the first failure.
#include <lightweight_dispatch/runtime.h>

#include <ATen/Parallel.h>

#include <iostream>
#include <string>
#include <vector>

namespace ld = lightweight_dispatch;

namespace {

ld::SpecializedCallSite the_site(const ld::Model& model) {
  const std::vector<ld::SpecializedCallSite> sites = model.specialized_sites();
  if (sites.size() != 1) {
    throw std::runtime_error(model.path() + " has " + std::to_string(sites.size()) + " sites, not 1");
  }
  return sites.front();
}

std::string notes_of(const ld::SpecializedCallSite& site) {
  std::string text;
  for (const std::string& note : site.notes) {
    text += (text.empty() ? "" : " | ") + note;
  }
  return text.empty() ? "(none)" : text;
}

bool check(bool ok, const std::string& what, const std::string& detail) {
  std::cout << (ok ? "ok   " : "FAIL ") << what << ": " << detail << "\n";
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: race_timing_check RACED.ptl RACED.inputs.pt BUSY.ptl BUSY.inputs.pt\n";
    return 2;
  }
  try {
    at::set_num_threads(2); // races then run on the caller's thread, after the preparation run
    const ld::Model raced = ld::Model::load(argv[1]);
    const ld::Model busy = ld::Model::load(argv[3]);
    const std::vector<c10::IValue> raced_inputs = ld::load_inputs(argv[2], raced);
    const std::vector<c10::IValue> busy_inputs = ld::load_inputs(argv[4], busy);

    raced.forward(raced_inputs);
    raced.wait_for_kernels(); // its site is compiled and checked; its race waits for the caller's next call
    busy.forward(busy_inputs); // starts BUSY's preparation run
    const bool busy_before = busy.background_preparation().running;
    raced.forward(raced_inputs);
    const bool busy_after = busy.background_preparation().running;
    if (!check(busy_before && busy_after, "a call made while another model's preparation run is running",
            std::string("running before the call: ") + (busy_before ? "yes" : "no") +
                ", after it: " + (busy_after ? "yes" : "no"))) {
      return 1;
    }
    const ld::SpecializedCallSite during = the_site(raced);
    bool ok = check(during.notes.empty() && during.specialized_calls == 0 && during.generated_calls == 2,
        "the race waits and the call runs the generated kernels",
        "notes " + notes_of(during) + ", generated calls " + std::to_string(during.generated_calls) +
            ", compiled calls " + std::to_string(during.specialized_calls));

    busy.wait_for_kernels();
    raced.forward(raced_inputs); // races, and loses (the hook): a first loss does not stand yet
    const ld::SpecializedCallSite first_race = the_site(raced);
    ok = check(first_race.notes.empty() && first_race.generated_calls == 3,
             "with no preparation run in flight the next call races, and a first loss is run again",
             "notes " + notes_of(first_race) + ", generated calls " + std::to_string(first_race.generated_calls)) && ok;
    raced.forward(raced_inputs);
    const ld::SpecializedCallSite after = the_site(raced);
    const bool raced_now = after.notes.size() == 1 &&
                           after.notes.front().find("timed on the caller's thread") != std::string::npos;
    ok = check(raced_now && after.generated_calls == 4, "the second loss stands, with its note",
             "notes " + notes_of(after) + ", generated calls " + std::to_string(after.generated_calls)) && ok;
    raced.forward(raced_inputs);
    const ld::SpecializedCallSite settled = the_site(raced);
    ok = check(settled.notes.size() == 1 && settled.generated_calls == 5, "no third race",
             "notes " + notes_of(settled)) && ok;
    std::cout << (ok ? "race_timing_check: ok" : "race_timing_check: failed") << "\n";
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cout << "FAIL unexpected exception: " << e.what() << "\n";
    return 1;
  }
}

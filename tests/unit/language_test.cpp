// Correctness of the language: each test states the values a construct must produce.
#include <doctest/doctest.h>

#include <tuple>

#include "helpers.h"
#include "lang/value.h"

using namespace loom;
using loom::testing::error_of;
using loom::testing::evaluate;

TEST_CASE("literals, arithmetic and printing") {
  auto e = evaluate(R"(print(1 + 2 * 3, 7 // 2, -7 // 2, 7 % 3, 7 / 2, 2 * 1.5)
print(512MiB, 2GiB, 64KB, 1.5KiB, 2GiB / 2, 1GiB + 1GiB)
print(true and false, true or false, not true, 1 < 2, "a" < "b", 3 == 3.0, none, auto)
print([1, 2] + [3], "ab" + "c", 1_000_000)
)");
  CHECK(e->printed == "7 3 -4 1 3.5 3.0\n512MiB 2GiB 64KB 1536B 1GiB 2GiB\nfalse true false true true true none auto\n[1, 2, 3] abc 1000000\n");
}

TEST_CASE("sizes print in their largest unit, negative ones with their sign") {
  CHECK(format_size(0) == "0 B");
  CHECK(format_size(1536) == "1.5 KiB");
  CHECK(format_size(int64_t(104) << 20) == "104.0 MiB");
  CHECK(format_size(-(int64_t(104) << 20)) == "-104.0 MiB");  // a calibration's memory outside the model can be negative
  CHECK(format_size(int64_t(80) << 30) == "80.00 GiB");
}

TEST_CASE("byte sizes are read exactly") {
  // In a double, 4.1MB is 4099999.9999999995 bytes: once refused as "not a whole number of bytes".
  auto e = evaluate("print(4.1MB, 8.2MB, 2.01KB, 1_000.5KB, 0B, 9223372036854775807B)\n");
  CHECK(e->printed == "4100KB 8200KB 2010B 1000500B 0B 9223372036854775807B\n");
  CHECK(error_of("print(0.3KiB)\n").find("byte size 0.3KiB is not a whole number of bytes") != std::string::npos);
  CHECK(error_of("print(9223372036854775808B)\n").find("byte size 9223372036854775808B is too large") != std::string::npos);
}

TEST_CASE("strings interpolate expressions") {
  auto e = evaluate(R"(let i = 3
let name = "h"
print("{name}.{i + 1}.mlp", "\{literal\}", "q{[1, 2]}")
)");
  CHECK(e->printed == "h.4.mlp {literal} q[1, 2]\n");
}

TEST_CASE("let, assignment, if/else and for") {
  auto e = evaluate(R"(let total = 0
for i in range(5) {
    if i % 2 == 0 {
        total = total + i
    } else if i == 3 {
        total = total + 100
    } else {
        total = total - 1
    }
}
print(total)
for x in [10, 20] { print(x) }
print(range(2, 10, 3), range(3, 0, -1), len([1, 2, 3]), len("abcd"), min(3, 1, 2), max([4, 9, 2]))
)");
  CHECK(e->printed == "105\n10\n20\n[2, 5, 8] [3, 2, 1] 3 4 1 9\n");
}

TEST_CASE("def, return, recursion and keyword arguments") {
  auto e = evaluate(R"(def fib(n) {
    if n < 2 { return n }
    return fib(n - 1) + fib(n - 2)
}
def scale(x, by) { return x * by }
print(fib(10), scale(by=3, x=2), scale(4, 5))
def nothing() { }
print(nothing())
)");
  CHECK(e->printed == "55 6 20\nnone\n");
}

TEST_CASE("variables are scoped to their block; functions see globals") {
  auto e = evaluate(R"(let g = 1
def f() { return g + 1 }
if true { let local = 5; print(local) }
print(f())
)");
  CHECK(e->printed == "5\n2\n");
  CHECK(error_of("if true { let y = 1 }\nprint(y)\n").find("unknown name 'y'") != std::string::npos);
}

TEST_CASE("world, local_world and dp follow the run and the mesh") {
  auto e = evaluate("print(world, local_world, dp)\n", "gpt2", {8, 4});
  CHECK(e->printed == "8 4 8\n");
  auto m = evaluate("sch.mesh(tp=2, pp=2)\nprint(dp)\n", "gpt2", {8, 0});
  CHECK(m->printed == "2\n");
}

TEST_CASE("module selection: exact, glob, relative, len and iteration") {
  auto e = evaluate(R"(print(len(sch["h"]), len(sch["h.*"]), len(sch["h.*.mlp.c_*"]))
let b = sch["h.3"]
b["attn.c_attn"].checkpoint()
for blk in sch["h.1?"] { blk["mlp"].checkpoint() }
print(len(sch["h.0"]))
)");
  CHECK(e->printed == "12 12 24\n4\n");
  auto& trace = e->schedule->trace();
  REQUIRE(trace.size() == 3);
  CHECK(trace[0].target == "h.3.attn.c_attn");
  CHECK(trace[1].target == "h.10.mlp");
  CHECK(trace[2].target == "h.11.mlp");
}

TEST_CASE("blocks() selects the entries of the largest ModuleList, whatever the model names it") {
  auto gpt = evaluate("print(len(sch.blocks()))\nsch.blocks()[\"mlp\"].checkpoint()\n", "gpt2");
  CHECK(gpt->printed == "12\n");
  REQUIRE(gpt->schedule->trace().size() == 12);
  CHECK(gpt->schedule->trace()[11].target == "h.11.mlp");
  auto llama = evaluate("sch.blocks().checkpoint()\n", "llama-13b");
  REQUIRE(llama->schedule->trace().size() == 40);
  CHECK(llama->schedule->trace()[0].target == "layers.0");
  CHECK(error_of("sch[\"h.0\"].blocks().checkpoint()\n") ==
        "test.sched:1:12: `h.0` in model gpt2 holds no ModuleList, so blocks() has nothing to select");
  CHECK(error_of("sch.blocks(2)\n") == "test.sched:1:1: blocks() takes no arguments");
}

TEST_CASE("parameter_count counts a subtree's parameters, a tied one at its first owner only, in any order of adding") {
  ModuleTree tree;
  int a = tree.add(0, "a", "Block");
  int b = tree.add(0, "b", "Block");
  int a_fc = tree.add(a, "fc", "Linear");  // added after b: the subtree is not contiguous
  tree.add_param(a_fc, {"weight", {4, 3}, "float32", ""});
  tree.add_param(b, {"weight", {5}, "float32", ""});
  tree.add_param(b, {"tied", {4, 3}, "float32", "a.fc.weight"});
  CHECK(tree.parameter_count() == 17);
  CHECK(tree.parameter_count(a) == 12);
  CHECK(tree.parameter_count(b) == 5);
  CHECK(tree.parameter_count(a_fc) == 12);
}

TEST_CASE("a call on a multi-module selection applies to each match in order") {
  auto e = evaluate("sch[\"h.*.attn\"].checkpoint()\n");
  REQUIRE(e->schedule->trace().size() == 12);
  for (int i = 0; i < 12; ++i) CHECK(e->schedule->trace()[i].target == "h." + std::to_string(i) + ".attn");
}

TEST_CASE("import evaluates a file once, relative to the importer, then the stdlib") {
  auto e = evaluate("import \"stdlib/zero3.sched\"\nimport \"stdlib/zero3.sched\"\n", "gpt2", {4, 0});
  CHECK(e->schedule->trace().size() == 13);  // shard_states + 12 prefetch, once
  CHECK(e->schedule->trace()[0].to_sched() == "sch.shard_states(params=4, grads=4, optim=4)");
}

TEST_CASE("evaluation limits turn runaway programs into errors") {
  CHECK(error_of("def f(n) { return f(n + 1) }\nf(0)\n").find("nested more than 200 deep") != std::string::npos);
  CHECK(error_of("let x = range(100000000)\n").find("too large") != std::string::npos);
  CHECK(error_of("print(1 // 0)\n").find("division by zero") != std::string::npos);
}

TEST_CASE("sizes on the command line: read exactly, a fraction of a byte dropped, and what is wrong named") {
  using Problem = SizeReading::Problem;
  auto read = [](const std::string& text) {
    SizeReading s = read_size(text);
    return std::make_tuple(s.bytes, s.problem, s.fraction_dropped);
  };
  CHECK(read("4.1MB") == std::make_tuple(int64_t{4'100'000}, Problem::None, false));
  CHECK(read("9.2MiB") == std::make_tuple(int64_t{9'646'899}, Problem::None, true));  // 9,646,899.2
  CHECK(read("600MiB") == std::make_tuple(int64_t{600} << 20, Problem::None, false));
  CHECK(read(".5KiB") == std::make_tuple(int64_t{512}, Problem::None, false));
  CHECK(read("9223372036854775807") == std::make_tuple(int64_t{9'223'372'036'854'775'807}, Problem::None, false));
  CHECK(std::get<1>(read("9223372036854775808")) == Problem::TooLarge);
  CHECK(std::get<1>(read("99999999TiB")) == Problem::TooLarge);
  CHECK(read("0.3B") == std::make_tuple(int64_t{0}, Problem::BelowOneByte, true));
  CHECK(std::get<1>(read("00")) == Problem::BelowOneByte);
  for (const char* text : {"", ".", "1..2", "0x10", "1e3", "-1", " 1", "1KiBx", "1kib", "lots"}) {
    CAPTURE(text);
    CHECK(std::get<1>(read(text)) == Problem::NotASize);
  }
  CHECK(parse_size("9.2MiB") == 9'646'899);
  CHECK(parse_size("0.3B") == -1);
}

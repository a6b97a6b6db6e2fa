// Escape suite: no denial without a report, and nothing an agent puts into the supervisor
// goes unbounded or unescaped (issue #15; SPEC.md C2, C8, E4, E7). See escape_test.cc.
#include <optional>

#include "escape_fixture.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Bounds from src/supervisor/violation_log.h (docs/events.md).
constexpr size_t kMaxRepeatEvents = 1000;
constexpr size_t kMaxDistinct = 1000;
constexpr size_t kMaxAreas = 1000;
constexpr size_t kMaxResourceBytes = 1024;

class EscapeReportTest : public EscapeTest {
 protected:
  // The attack pack with /tmp writable too (the deep working directory lives there), but
  // for a read-only pack (which may write only /workdir/out).
  void set_manifest(const std::string& tier = "side-effect") {
    dir_.write("pack/soyapack.yaml", "soyapack: v0\nname: escape-attack\nversion: 0.1.0\n"
                                     "agent: {runtime: python3, entrypoint: attack.py}\n"
                                     "capabilities:\n  egress: []\n"
                                     "  fs: {read: [/workdir], write: [/workdir/out" +
                                         std::string(tier == "read-only" ? "" : ", /tmp") + "]}\n"
                                     "  determinism_tier: " + tier +
                                         "\nresources: {timeout: 60s, write_quota: 16Mi}\n");
  }

  static std::optional<json> find_violation(const AttackRun& run, const std::string& resource,
                                            const std::string& access, const std::string& err) {
    for (const auto& v : run.of_type("capability_violation")) {
      const auto& d = v["data"];
      if (d.value("resource", "") == resource && d.value("access", "") == access && d.value("errno", "") == err) {
        return v;
      }
    }
    return std::nullopt;
  }
  static json run_finished(const AttackRun& run) {
    auto f = run.of_type("run_finished");
    return f.empty() ? json() : f.back()["data"];
  }
};

bool has_byte(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// ---- every refusal of the manifest's surfaces is reported, with the promised errno -------

TEST_F(EscapeReportTest, EveryRefusedWriteListingAndUnresolvablePathIsReported) {
  set_manifest();
  auto run = attack({"report"});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  // Writes outside fs.write, by fd and by path: EACCES (C2), never EROFS or EINVAL.
  for (const char* c :
       {"rep.fchmod_pack", "rep.fchmod_libc", "rep.futimens_pack", "rep.futimens_libc", "rep.ftruncate_pack",
        "rep.fchown_pack", "rep.fsetxattr_pack", "rep.fremovexattr_pack", "rep.chmod_pack",
        "rep.fchmodat_nofollow_libc", "rep.utime_pack", "rep.utime_nofollow_etc", "rep.truncate_pack",
        "rep.chown_pack", "rep.lchown_libc", "rep.fchownat_pack", "rep.setxattr_pack", "rep.lsetxattr_libc",
        "rep.removexattr_pack", "rep.link_in_pack", "rep.symlink_in_pack", "rep.symlink_in_usr",
        "rep.rename_pack_file", "rep.rename_into_usr", "rep.mkdir_in_pack", "rep.mkdir_at_root",
        "rep.rmdir_usr_lib", "rep.unlink_pack", "rep.mkfifo_in_pack", "rep.mknod_in_usr", "rep.bind_unix_pack",
        "rep.bind_unix_etc", "rep.bind_unix_relative"}) {
    EXPECT_CASE(run, c, "errno=EACCES");
  }
  // Listing a directory seen only as an ancestor of declared paths: refused (Landlock would
  // say EACCES) and reported.
  EXPECT_CASE(run, "rep.list_root", "errno=EACCES");
  EXPECT_CASE(run, "rep.list_etc", "errno=EACCES");
  // A working directory deeper than PATH_MAX: the observer cannot resolve, so it refuses
  // and reports (fail closed), even where the path would have been allowed.
  for (const char* c : {"rep.deep_read_shadow", "rep.deep_read_pack", "rep.deep_write_usr", "rep.deep_create_here",
                        "rep.deep_dirfd"}) {
    EXPECT_CASE(run, c, "errno=EACCES");
  }
  // Allowed counterparts work and are not reported.
  for (const char* c : {"rep.ok_fchmod_out", "rep.ok_futimens_out", "rep.ok_ftruncate_out", "rep.ok_chmod_out",
                        "rep.ok_utime_out", "rep.ok_rename_out", "rep.ok_link_out", "rep.ok_symlink_out",
                        "rep.ok_mkdir_out", "rep.ok_mkfifo_tmp", "rep.ok_bind_unix_tmp", "rep.ok_bind_abstract",
                        "rep.ok_memfd_ftruncate"}) {
    EXPECT_CASE(run, c, "ok");
  }
  EXPECT_CASE(run, "rep.ok_list_usr", "ok True");
  EXPECT_CASE(run, "rep.ok_list_workdir", "ok True");
  // Ownership and xattrs where writing is allowed: no capability, so EPERM, not a violation.
  EXPECT_CASE(run, "rep.eperm_chown_out", "errno=EPERM");
  EXPECT_CASE(run, "rep.eperm_setxattr_out", "errno=EPERM");
  EXPECT_EQ(run.get("rep.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();

  // The reports: resource, access, errno, and the syscall the agent made.
  struct Want {
    const char* resource;
    const char* access;
    const char* err;
    std::set<std::string> syscalls;
  };
  const std::vector<Want> wants = {
      {"/workdir/attack.py", "write", "EACCES",
       {"fchmod", "utimensat", "ftruncate", "fchown", "fsetxattr", "fremovexattr", "chmod", "fchmodat", "utime",
        "utimes", "truncate", "chown", "fchownat", "setxattr", "removexattr", "rename", "renameat", "renameat2",
        "unlink", "unlinkat"}},
      {"/etc/passwd", "write", "EACCES", {"utimensat"}},
      {"/workdir/hl", "write", "EACCES", {"link", "linkat"}},
      {"/workdir/sl", "write", "EACCES", {"symlink", "symlinkat"}},
      {"/usr/lib/sl", "write", "EACCES", {"symlink", "symlinkat"}},
      {"/usr/lib/mv2", "write", "EACCES", {"rename", "renameat", "renameat2"}},
      {"/workdir/d", "write", "EACCES", {"mkdir", "mkdirat"}},
      {"/newdir", "write", "EACCES", {"mkdir", "mkdirat"}},
      {"/usr/lib", "write", "EACCES", {"rmdir", "unlinkat"}},
      {"/workdir/fifo", "write", "EACCES", {"mknod", "mknodat"}},
      {"/usr/lib/node", "write", "EACCES", {"mknod", "mknodat"}},
      {"/workdir/sock", "write", "EACCES", {"bind"}},
      {"/etc/sock", "write", "EACCES", {"bind"}},
      {"/workdir/rel.sock", "write", "EACCES", {"bind"}},
      {"/", "read", "EACCES", {"open", "openat"}},
      {"/etc", "read", "EACCES", {"open", "openat"}},
  };
  std::set<std::string> seen_syscalls;
  for (const auto& v : run.of_type("capability_violation")) {
    seen_syscalls.insert(v["data"].value("syscall", "") + " " + v["data"].value("resource", ""));
  }
  for (const auto& w : wants) {
    const auto v = find_violation(run, w.resource, w.access, w.err);
    ASSERT_TRUE(v.has_value()) << "no " << w.access << " " << w.err << " violation for " << w.resource << "\n"
                          << run.context();
    EXPECT_TRUE(w.syscalls.count((*v)["data"].value("syscall", "")) == 1) << v->dump();
    EXPECT_EQ((*v)["data"].value("surface", ""), "fs");
  }
  // fchmod, ftruncate, fchown, fsetxattr and bind each reported under their own name.
  for (const char* s : {"fchmod /workdir/attack.py", "ftruncate /workdir/attack.py", "fchown /workdir/attack.py",
                        "fsetxattr /workdir/attack.py", "fremovexattr /workdir/attack.py", "bind /workdir/sock"}) {
    EXPECT_EQ(seen_syscalls.count(s), 1u) << s << " not reported\n" << run.context();
  }
  // The deep working directory: every attempt reported, marked unresolvable, as the
  // access it was (a read of /etc/shadow, a write into the runtime layer).
  size_t deep_reads = 0, deep_writes = 0;
  for (const auto& v : run.violations("fs")) {
    const auto& d = v["data"];
    const std::string r = d.value("resource", "");
    if (r.rfind("<unresolvable>/", 0) != 0) continue;
    EXPECT_EQ(d.value("errno", ""), "EACCES") << v.dump();
    EXPECT_FALSE(d.value("detail", "").empty()) << v.dump();
    EXPECT_LE(r.size(), kMaxResourceBytes + 32) << "unbounded resource";
    (d.value("access", "") == "read" ? deep_reads : deep_writes)++;
  }
  EXPECT_GE(deep_reads, 3u) << run.context();   // shadow, attack.py, the dirfd "."
  EXPECT_GE(deep_writes, 2u) << run.context();  // /usr/lib/pwned, "here"
  // Nothing allowed was reported: no violation names /workdir/out, /tmp or a memfd.
  for (const auto& v : run.of_type("capability_violation")) {
    const std::string r = v["data"].value("resource", "");
    EXPECT_NE(r.rfind("/workdir/out", 0), 0u) << v.dump();
    EXPECT_NE(r.rfind("/tmp", 0), 0u) << v.dump();
    EXPECT_EQ(r.find("memfd"), std::string::npos) << v.dump();
  }
  // The run's totals agree with the events (no cap reached here).
  EXPECT_EQ(run_finished(run).value("violations", 0u), run.of_type("capability_violation").size());
}

// ---- set-id modes, the newer *at syscalls and clone3: no silent refusal -------------------

TEST_F(EscapeReportTest, SetIdModesNewerFsSyscallsAndClone3AreRefusedAndReported) {
  set_manifest();
  auto run = attack({"modes"});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  // Set-id bits, by path, by fd, through fchmodat2 (plain, NOFOLLOW, AT_EMPTY_PATH), with high
  // register bits, on a memfd and in /tmp: EPERM everywhere, each reported.
  const std::vector<std::pair<const char*, const char*>> setid = {
      {"mode.setuid_chmod", "chmod"},           {"mode.setgid_chmod", "chmod"},
      {"mode.setuid_chmod_high", "chmod"},      {"mode.setuid_fchmod", "fchmod"},
      {"mode.setuid_fchmodat", "fchmodat"},     {"mode.setuid_fchmodat2", "fchmodat2"},
      {"mode.setuid_fchmodat2_nofollow", "fchmodat2"}, {"mode.setuid_fchmodat2_empty", "fchmodat2"},
      {"mode.setuid_fchmod_memfd", "fchmod"},   {"mode.setuid_chmod_tmp", "chmod"}};
  for (const auto& [c, syscall] : setid) EXPECT_CASE(run, c, "errno=EPERM");
  // Outside fs.write: EACCES (C2), never EROFS.
  for (const char* c : {"mode.setuid_chmod_pack", "mode.fchmodat2_pack", "mode.fchmodat2_libc_nofollow",
                        "mode.fchmodat2_empty_pack", "mode.setxattrat_pack", "mode.setxattrat_libc_nofollow",
                        "mode.removexattrat_pack", "mode.file_setattr_pack", "mode.file_setattr_etc"}) {
    EXPECT_CASE(run, c, "errno=EACCES");
  }
  // Allowed counterparts reach the kernel.
  EXPECT_CASE(run, "mode.ok_fchmodat2_out", "ok 0");
  EXPECT_CASE(run, "mode.ok_fchmodat2_empty_out", "ok 0");
  EXPECT_CASE(run, "mode.ok_sticky_chmod_out", "ok");
  EXPECT_CASE(run, "mode.ok_fchmod_memfd", "ok");
  EXPECT_CASE(run, "mode.eperm_setxattrat_out", "errno=EPERM");
  // Inode changes by ioctl through a read-only fd: EACCES (not the mount's EROFS), reported.
  for (const char* c : {"mode.ioctl_setflags_pack", "mode.ioctl_setflags_high_libc", "mode.ioctl_fssetxattr_pack"}) {
    EXPECT_CASE(run, c, "errno=EACCES");
  }
  EXPECT_CASE(run, "mode.ok_ioctl_setflags_out", "ok");
  EXPECT_NE(run.get("mode.ok_ioctl_getflags_pack"), "errno=EACCES") << run.context();
  EXPECT_NE(run.get("mode.ok_ioctl_getflags_pack"), "<missing>") << run.context();  // no capability: the kernel's answer too
  for (const char* c : {"mode.getxattrat_out", "mode.file_getattr_out", "mode.file_setattr_out"}) {
    EXPECT_NE(run.get(c), "errno=EACCES") << c << " was refused by the Comet\n" << run.context();
    EXPECT_NE(run.get(c), "errno=EPERM") << c << " was refused by the seccomp default\n" << run.context();
    EXPECT_NE(run.get(c), "<missing>") << run.context();
  }
  // clone3: a process is EPERM (C3), a thread ENOSYS so that glibc falls back to clone.
  EXPECT_CASE(run, "mode.clone3_fork", "errno=EPERM");
  EXPECT_CASE(run, "mode.clone3_vfork", "errno=EPERM");
  EXPECT_CASE(run, "mode.clone3_thread", "errno=ENOSYS");
  EXPECT_CASE(run, "mode.clone3_bad_pointer", "errno=ENOSYS");
  EXPECT_CASE(run, "mode.thread_still_works", "ok joined");
  // Nothing set-id exists in /workdir/out; the allowed modes took effect.
  EXPECT_CASE(run, "mode.out_modes", "ok m1:644,m4:644,m6:644,m8:644,n1:640,n3:1644");
  EXPECT_EQ(run.get("mode.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  expect_out_is_inert(16u << 20);

  // The reports: every set-id attempt as an fs write refused with EPERM, under its syscall.
  std::multiset<std::string> setid_reports;
  std::set<std::string> eacces_reports;
  size_t clone3_reports = 0;
  for (const auto& v : run.of_type("capability_violation")) {
    const auto& d = v["data"];
    const std::string r = d.value("resource", ""), sc = d.value("syscall", ""), err = d.value("errno", "");
    if (d.value("surface", "") == "exec" && sc == "clone3") {
      EXPECT_EQ(err, "EPERM") << v.dump();
      EXPECT_EQ(r, "process") << v.dump();
      ++clone3_reports;
      continue;
    }
    ASSERT_EQ(d.value("surface", ""), "fs") << v.dump();
    EXPECT_EQ(d.value("access", ""), "write") << v.dump();
    if (err == "EPERM") {
      EXPECT_NE(d.value("detail", "").find("set-id"), std::string::npos) << v.dump();
      setid_reports.insert(sc);
      if (r.rfind("/workdir/out/", 0) == 0) {
        EXPECT_EQ(d.value("manifest_entry", ""), "capabilities.fs.write[0]") << v.dump();
      }
    } else {
      EXPECT_EQ(err, "EACCES") << v.dump();
      eacces_reports.insert(sc + " " + r);
    }
    // Nothing allowed was reported.
    EXPECT_EQ(r.find("/workdir/out/n"), std::string::npos) << v.dump();
  }
  std::multiset<std::string> want_setid;
  for (const auto& [c, syscall] : setid) want_setid.insert(syscall);
  EXPECT_EQ(setid_reports, want_setid) << run.context();
  EXPECT_EQ(clone3_reports, 2u) << run.context();
  for (const char* s : {"chmod /workdir/attack.py", "fchmodat2 /workdir/attack.py", "fchmodat2 /usr/lib/x86_64-linux-gnu/libc.so.6",
                        "setxattrat /workdir/attack.py", "removexattrat /workdir/attack.py",
                        "file_setattr /workdir/attack.py", "file_setattr /etc/passwd", "ioctl /workdir/attack.py",
                        "ioctl /usr/lib/x86_64-linux-gnu/libc.so.6"}) {
    EXPECT_EQ(eacces_reports.count(s), 1u) << s << " not reported\n" << run.context();
  }
  EXPECT_EQ(run_finished(run).value("violations", 0u), run.of_type("capability_violation").size());
}

// ---- a flood of violations stays bounded in memory, events and stderr ---------------------

TEST_F(EscapeReportTest, DistinctDecoysDoNotHideTheRealRead) {
  // Issue #17: 1,000 decoy violations hid a ~/.ssh read. 20,000 distinct decoys (20 times
  // the distinct bound) in one directory, then the real read elsewhere.
  auto run = attack({"decoys", "20000"});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  EXPECT_EQ(run.get("decoys.real"), "ENOENT");
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  const json finished = run_finished(run);
  ASSERT_TRUE(finished.is_object()) << "no run_finished";
  EXPECT_EQ(finished.value("violations", uint64_t{0}), 20001u);
  EXPECT_GT(finished["events_dropped"].value("capability_violation", uint64_t{0}), 18000u) << finished.dump();
  // Findable where a responder looks: the Moon, by type.
  const std::string run_id = finished.value("run_id", "");
  auto q = run_soyaos({"scope", "query", "--run", run_id, "--type", "capability_violation", "--format", "json"},
                      extra_env_, dir_.path());
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("\"resource\":\"/root/.ssh/id_ed25519\""), std::string::npos)
      << "the real read is not among the stored violations";
  EXPECT_TRUE(find_violation(run, "/root/.ssh/id_ed25519", "read", "ENOENT").has_value());
}

TEST_F(EscapeReportTest, ViolationFloodIsBoundedAggregatedAndCounted) {
  std::atomic<bool> stop{false};
  long hwm = 0;
  std::thread sampler([&] { hwm = sample_children_hwm(stop); });
  auto run = attack({"vflood", "6"});
  stop = true;
  sampler.join();
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  const std::string tried_text = run.get("flood.tried");
  ASSERT_EQ(tried_text.rfind("ok ", 0), 0u) << tried_text;
  const uint64_t tried = std::stoull(tried_text.substr(3));
  EXPECT_GT(tried, kMaxRepeatEvents + kMaxDistinct) << "the flood was too small to test the bounds";
  EXPECT_EQ(run.output.exit_code, 3) << run.context();

  const auto violations = run.of_type("capability_violation");
  const json finished = run_finished(run);
  ASSERT_TRUE(finished.is_object()) << "no run_finished";
  // Every attempt counted; at most the documented number of events.
  EXPECT_EQ(finished.value("violations", uint64_t{0}), tried);
  EXPECT_EQ(finished["violations_by_surface"].value("fs", uint64_t{0}), tried);
  EXPECT_LE(violations.size(), kMaxRepeatEvents + kMaxDistinct + kMaxAreas);
  // Distinct resources past the bound are dropped and counted per type (E4).
  const uint64_t dropped = finished["events_dropped"].value("capability_violation", uint64_t{0});
  EXPECT_GT(dropped, 0u) << finished.dump();
  // Repeats past the cap are aggregated by surface + resource with count, first, last.
  uint64_t aggregated = 0;
  bool shadow = false;
  for (const auto& a : finished["violations_aggregated"]) {
    aggregated += a.value("count", uint64_t{0});
    if (a.value("resource", "") == "/etc/shadow") {
      shadow = true;
      EXPECT_GT(a.value("count", 0), 0) << a.dump();
      EXPECT_FALSE(a.value("first", "").empty());
      EXPECT_GE(a.value("last", ""), a.value("first", ""));
    }
  }
  EXPECT_TRUE(shadow) << finished["violations_aggregated"].dump().substr(0, 2000);
  EXPECT_EQ(violations.size() + aggregated + dropped, tried) << "some violation was neither reported nor counted";
  // Long resources are cut with a marker.
  for (const auto& v : violations) {
    const std::string r = v["data"].value("resource", "");
    EXPECT_LE(r.size(), kMaxResourceBytes + 32) << r.substr(0, 100);
    if (r.rfind("/etc/flood-", 0) == 0) {
      EXPECT_NE(r.find("bytes]"), std::string::npos) << r.substr(0, 100);
    }
  }
  // The terminal attack in a path reached neither stderr nor the events raw.
  EXPECT_FALSE(has_byte(run.output.err, '\x1b')) << "an escape sequence reached soyaos's stderr";
  EXPECT_NE(run.output.err.find("\\x1B[2K"), std::string::npos) << run.output.err.substr(0, 3000);
  EXPECT_TRUE(find_violation(run, "/etc/\x1b[2K\x1b[1A\rsoyaos: run ok: 0 violations\x1b[8m", "read", "ENOENT")
                  .has_value());
  // stderr stays small: a bounded summary, not one line per violation.
  EXPECT_LT(run.output.err.size(), 96u << 10) << "stderr grew to " << run.output.err.size() << " bytes";
  // The supervisor's memory stays bounded (measured: VmHWM of soyaos).
  EXPECT_GT(hwm, 0) << "the supervisor process was never sampled";
  // The bound is asserted in the normal build (scripts/test.sh, CI's last step). Under
  // AddressSanitizer the allocator's quarantine and shadow memory make the peak a measure of
  // ASan (measured 554 MiB for the same flood that peaks at 24 MiB without it), not of soyaos.
  if (!soyaos_sanitized()) {
    constexpr long kBoundKib = 64 * 1024;
    EXPECT_LT(hwm, kBoundKib) << "soyaos peaked at " << hwm << " KiB during a violation flood";
  }
  RecordProperty("violations_tried", std::to_string(tried));
  RecordProperty("soyaos_vmhwm_kib", std::to_string(hwm));
  RecordProperty("stderr_bytes", std::to_string(run.output.err.size()));
}

// ---- agent-chosen names are escaped for people and encoded for JSON ----------------------

TEST_F(EscapeReportTest, HostileOutputNamesAreEscapedBoundedAndNeverFailTheRun) {
  // read-only and with the result cache: a name that is not UTF-8 must not fail the store.
  set_manifest("read-only");
  auto events = dir_.path() / "events.jsonl";
  auto out = run_soyaos({"run", pack_.string(), "--out", out_dir().string(), "--events", events.string(), "--",
                         "names", "300"},
                        extra_env_, dir_.path());
  EXPECT_EQ(out.exit_code, 0) << out.err.substr(0, 3000);
  EXPECT_NE(out.out.find("CASE names.made ok 300"), std::string::npos) << out.out.substr(0, 2000);
  EXPECT_FALSE(has_byte(out.err, '\x1b')) << "an escape sequence reached soyaos's stderr";
  EXPECT_FALSE(has_byte(out.err, '\x07'));
  // Every event line is valid JSON (json::parse rejects invalid UTF-8).
  std::vector<json> lines;
  std::istringstream in(read_file(events));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ASSERT_NO_THROW(lines.push_back(json::parse(line))) << line.substr(0, 300);
  }
  ASSERT_FALSE(lines.empty());
  const json& finished = lines.back()["data"];
  ASSERT_EQ(lines.back()["type"], "run_finished");
  const json& outputs = finished["outputs"];
  EXPECT_EQ(outputs.value("skipped_count", 0), 301) << outputs.dump().substr(0, 500);  // 300 FIFOs + a link
  EXPECT_LE(outputs["skipped"].size(), 100u);
  bool encoded = false;
  for (const auto& s : outputs["skipped"]) {
    const std::string text = s.get<std::string>();
    EXPECT_LE(text.size(), 2 * kMaxResourceBytes + 64);
    if (text.find("f\\xFF-") != std::string::npos) encoded = true;
  }
  EXPECT_TRUE(encoded) << "invalid UTF-8 bytes are written \\xNN in JSON";
  // The host gets the real bytes.
  for (const std::string& name : {std::string("esc-\x1b[2J\x1b[31mFAKE"), std::string("bidi-\xe2\x80\xaetxt.exe"),
                                 std::string("latin1-\xe9t\xe9"), std::string("bad-\xff\xfe")}) {
    EXPECT_TRUE(fs::exists(out_dir() / name)) << "output not collected under its own name";
  }
  // Human-readable views escape what they print.
  auto query = run_soyaos({"scope", "query", "--limit", "100000"}, extra_env_, dir_.path());
  EXPECT_EQ(query.exit_code, 0) << query.err;
  EXPECT_FALSE(has_byte(query.out, '\x1b'));
  auto cache = run_soyaos({"cache", "ls"}, extra_env_, dir_.path());
  EXPECT_FALSE(has_byte(cache.out, '\x1b'));
}

}  // namespace
}  // namespace soyaos::testing

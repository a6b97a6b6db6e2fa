// The Scope record's tamper evidence (moon/chain.h, Store::verify_chain; SPEC.md E6):
// a real store is tampered with through SQLite itself, the way an intruder with the file
// would, and each kind of tampering must be named; an untouched store, an upgraded one and
// one written by ten processes at once must verify clean.
#include <gtest/gtest.h>

#include <fstream>
#include <cstdio>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iterator>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/digest.h"
#include "moon/chain.h"
#include "moon/store.h"
#include "moon_test_util.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using testing::TmpDir;
using testing::read_file;

json event(const std::string& type, const std::string& run, int n) {
  scope::RunContext ctx{"host", run, "alpha", "1.0.0", "sha256:00"};
  return scope::make_event(ctx, type, {{"n", n}});
}

// Runs SQL on the store's file behind the Store's back (an intruder's sqlite3).
void tamper(const fs::path& home, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((home / "moon.db").c_str(), &db), SQLITE_OK);
  char* msg = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg);
  const std::string m = msg != nullptr ? msg : "";
  sqlite3_free(msg);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << m;
}

// Three runs of 4 events, each run one batch (as `soyaos run` stores them): seq 1..12.
void fill(const fs::path& home) {
  auto store = EventStore::open(home);
  ASSERT_TRUE(store) << store.error().describe();
  for (int r = 1; r <= 3; ++r) {
    const std::string run = "R" + std::to_string(r);
    std::vector<json> batch = {event("run_started", run, 0), event("capability_violation", run, 1),
                               event("dns_query", run, 2), event("run_finished", run, 3)};
    ASSERT_TRUE(store->append(batch));
  }
}

// fill()s the store at `home`, then reads its rows as stored (what an intruder with the
// database file works from).
void fill_and_read(const fs::path& home, std::vector<StoredEvent>* rows) {
  fill(home);
  auto store = EventStore::open(home);
  ASSERT_TRUE(store);
  auto stored = store->query({});
  ASSERT_TRUE(stored);
  *rows = std::move(*stored);
}

std::vector<std::string> verify(const fs::path& home, std::optional<std::string> run = std::nullopt) {
  auto store = Store::open(home);
  EXPECT_TRUE(store) << store.error().describe();
  if (!store) return {"cannot open"};
  auto report = store->verify_chain({std::move(run), nullptr});
  EXPECT_TRUE(report) << report.error().describe();
  return report ? report->problems : std::vector<std::string>{"cannot verify"};
}

std::string all(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

bool names(const std::vector<std::string>& problems, const std::string& a, const std::string& b = "") {
  for (const auto& p : problems) {
    if (p.find(a) != std::string::npos && (b.empty() || p.find(b) != std::string::npos)) return true;
  }
  return false;
}

TEST(MoonChain, UntouchedStoreVerifiesAndFollowsTheDocumentedFormula) {
  TmpDir t;
  fill(t.path());
  EXPECT_EQ(all(verify(t.path())), "");
  auto store = EventStore::open(t.path());
  ASSERT_TRUE(store);
  auto events = store->query({});
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 12U);
  std::string prev(chain::kGenesisHash);
  for (size_t i = 0; i < events->size(); ++i) {
    const auto& e = (*events)[i];
    EXPECT_EQ(e.seq, static_cast<int64_t>(i + 1));
    EXPECT_EQ(e.prev_hash, prev);
    // docs/events.md: sha256(DECIMAL(seq) "\n" prev_hash "\n" json)
    EXPECT_EQ(e.hash, sha256_hex(std::to_string(e.seq) + "\n" + prev + "\n" + e.json));
    prev = e.hash;
  }
  // The key: private to its owner, the public half beside it; the head file names the end.
  struct stat st {};
  ASSERT_EQ(::stat((t.path() / "moon.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_TRUE(fs::exists(t.path() / "moon.pub"));
  auto head = chain::read_head(t.path());
  ASSERT_TRUE(head && *head);
  EXPECT_EQ((*head)->seq, 12);
  EXPECT_EQ((*head)->hash, prev);
  EXPECT_EQ(all(verify(t.path(), "R2")), "");
}

// ---- each way of tampering by SQL, and what the verification must name ----

struct Finding {
  std::string a, b;  // one problem line holds both
};
struct TamperCase {
  const char* name;
  std::string sql;                       // run on a filled store (seq 1..12, runs R1..R3)
  std::vector<Finding> named;            // in the whole store's verification
  std::optional<size_t> exactly;         // that many problems, when it matters
  std::optional<std::string> run;        // scope verify --run RUN ...
  std::vector<Finding> named_for_run;    // ... names these
};

void PrintTo(const TamperCase& c, std::ostream* os) { *os << c.name; }

class MoonChainTamper : public ::testing::TestWithParam<TamperCase> {};

TEST_P(MoonChainTamper, IsNamed) {
  const TamperCase& c = GetParam();
  TmpDir t;
  fill(t.path());
  tamper(t.path(), c.sql);
  auto p = verify(t.path());
  for (const auto& f : c.named) EXPECT_TRUE(names(p, f.a, f.b)) << "'" << f.a << "' '" << f.b << "' in:\n" << all(p);
  if (c.exactly) {
    EXPECT_EQ(p.size(), *c.exactly) << all(p);
  }
  if (c.run) {
    auto r = verify(t.path(), *c.run);
    for (const auto& f : c.named_for_run) EXPECT_TRUE(names(r, f.a, f.b)) << f.a << " " << f.b << " in:\n" << all(r);
  }
}

INSTANTIATE_TEST_SUITE_P(
    MoonChain, MoonChainTamper,
    ::testing::Values(
        TamperCase{"EditedContent", "UPDATE events SET json=replace(json, '\"n\":1', '\"n\":7') WHERE seq=6",
                   {{"seq 6 (capability_violation, run R2)", "edited"}}, 1, "R2", {{"seq 6", "edited"}}},
        // The column alone (what --since filters on), and the event's own time.
        TamperCase{"BackdatedTime",
                   "UPDATE events SET time='2020-01-01T00:00:00.000000Z' WHERE seq=2; "
                   "UPDATE events SET json=replace(json, substr(json, instr(json, '\"time\":'), 36), "
                   "'\"time\":\"2020-01-01T00:00:00.000000Z\"') WHERE seq=7",
                   {{"seq 2 (", "backdated"}, {"seq 7 (", "edited"}}, std::nullopt, std::nullopt, {}},
        TamperCase{"DeletedMiddleRow", "DELETE FROM events WHERE seq=6", {{"seq 6: deleted", ""}}, std::nullopt, "R2",
                   {{"seq 6: deleted", ""}}},
        // The tail, its checkpoints and the sequence counter: only the head file remains.
        TamperCase{"TruncatedTailAndCounter",
                   "DELETE FROM events WHERE seq > 8; DELETE FROM checkpoints WHERE seq > 8; "
                   "UPDATE sqlite_sequence SET seq=8 WHERE name='events'",
                   {{"seq 9..12: deleted", "scope.head"}}, std::nullopt, std::nullopt, {}},
        // Without the sequence counter reset, the counter and the checkpoints say so too.
        TamperCase{"TruncatedTail", "DELETE FROM events WHERE seq > 10",
                   {{"seq 11..12: deleted", "sequence counter"}, {"checkpoint", "truncated after seq 10"}},
                   std::nullopt, std::nullopt, {}},
        TamperCase{"ReorderedRows",
                   "UPDATE events SET seq=-1 WHERE seq=6; UPDATE events SET seq=6 WHERE seq=7; "
                   "UPDATE events SET seq=7 WHERE seq=-1",
                   {{"seq 6 (", "edited"}, {"seq 7 (", "edited"}}, std::nullopt, std::nullopt, {}}),
    [](const ::testing::TestParamInfo<TamperCase>& info) { return std::string(info.param.name); });

TEST(MoonChain, TruncatedTailWithoutTheHeadFileIsNamed) {
  TmpDir t;
  fill(t.path());
  tamper(t.path(), "DELETE FROM events WHERE seq > 8; DELETE FROM checkpoints WHERE seq > 8; "
                   "UPDATE sqlite_sequence SET seq=8 WHERE name='events'");
  fs::remove(chain::head_path(t.path()));
  EXPECT_TRUE(names(verify(t.path()), "scope.head", "missing")) << all(verify(t.path()));
}

TEST(MoonChain, RehashedEditBreaksTheNextLinkAndTheCheckpoint) {
  TmpDir t;
  std::vector<StoredEvent> rows;
  ASSERT_NO_FATAL_FAILURE(fill_and_read(t.path(), &rows));
  // An intruder who knows the formula recomputes the edited row's hash.
  const auto& r = rows[4];  // seq 5
  std::string forged = r.json;
  forged.replace(forged.find("\"n\":0"), 5, "\"n\":9");
  const std::string h = chain::event_hash(5, r.prev_hash, forged);
  tamper(t.path(), "UPDATE events SET json='" + forged + "', hash='" + h + "' WHERE seq=5");
  auto p = verify(t.path());
  EXPECT_TRUE(names(p, "seq 6 (", "does not link to seq 5")) << all(p);
}

TEST(MoonChain, InsertedRowIsNamedEvenWithAValidHash) {
  TmpDir t;
  std::vector<StoredEvent> rows;
  ASSERT_NO_FATAL_FAILURE(fill_and_read(t.path(), &rows));
  // A fabricated violation for R3, linked and hashed by the formula, after the end.
  json forged = event("capability_violation", "R3", 5);
  const std::string text = forged.dump();
  const std::string h = chain::event_hash(13, rows.back().hash, text);
  tamper(t.path(), "INSERT INTO events (seq, time, type, run_id, pack, version, json, prev_hash, hash) VALUES (13, '" +
                       forged["time"].get<std::string>() + "', 'capability_violation', 'R3', 'alpha', '1.0.0', '" +
                       text + "', '" + rows.back().hash + "', '" + h + "')");
  auto p = verify(t.path());
  EXPECT_TRUE(names(p, "seq 13", "after the last checkpoint")) << all(p);
  EXPECT_TRUE(names(verify(t.path(), "R3"), "run R3", "after the last checkpoint"));
  // And one without a hash at all, in the middle of the numbering.
  tamper(t.path(), "INSERT INTO events (seq, time, type, json) VALUES (100, '2026-01-01', 'x', '{}')");
  EXPECT_TRUE(names(verify(t.path()), "seq 100 (x)", "not chained"));
}

TEST(MoonChain, ForgedCheckpointsAreNamed) {
  TmpDir t;
  fill(t.path());
  // A checkpoint whose signature is not the key's, and one signed by another key.
  tamper(t.path(), "INSERT INTO checkpoints (seq, hash, time, key_id, signature) SELECT seq, hash, time, key_id, "
                   "'AAAA' || substr(signature, 5) FROM checkpoints WHERE seq=8");
  TmpDir other;
  auto key = chain::MoonKey::load_or_create(other.path());
  ASSERT_TRUE(key) << key.error().describe();
  auto store = EventStore::open(t.path());
  auto rows = store->query({});
  auto cp = key->sign(4, (*rows)[3].hash, "2026-12-01T00:00:00.000000Z");
  ASSERT_TRUE(cp);
  tamper(t.path(), "INSERT INTO checkpoints (seq, hash, time, key_id, signature) VALUES (4, '" + cp->hash + "', '" +
                       cp->time + "', '" + cp->key_id + "', '" + cp->signature + "')");
  auto p = verify(t.path());
  EXPECT_TRUE(names(p, "(seq 8)", "bad signature")) << all(p);
  EXPECT_TRUE(names(p, "(seq 4)", "not by this Moon's key")) << all(p);
  // Verifying with a pinned key that is not the Moon's names every checkpoint.
  auto s = Store::open(t.path());
  auto pinned = chain::MoonKey::load_public(other.path());
  ASSERT_TRUE(pinned && *pinned);
  auto report = s->verify_chain({std::nullopt, &**pinned});
  ASSERT_TRUE(report);
  EXPECT_GE(report->problems.size(), 3U);
}

TEST(MoonChain, ReplacedPublicKeyIsRefusedForSigning) {
  TmpDir t;
  fill(t.path());
  TmpDir other;
  ASSERT_TRUE(chain::MoonKey::load_or_create(other.path()));
  fs::copy_file(other.path() / "moon.pub", t.path() / "moon.pub", fs::copy_options::overwrite_existing);
  auto store = EventStore::open(t.path());
  ASSERT_TRUE(store);
  std::vector<json> one = {event("run_started", "R9", 0)};
  auto s = store->append(one);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("moon.pub"), std::string::npos) << s.error().message;
  // A key file others can read is refused too.
  fs::copy_file(other.path() / "moon.pub", t.path() / "moon.pub", fs::copy_options::overwrite_existing);
  ::chmod((t.path() / "moon.key").c_str(), 0644);
  EXPECT_FALSE(chain::MoonKey::load_or_create(t.path()));
}

// The key files OpenSSL writes are read directly (a fast path); any other PEM layout of the
// same key (here: CRLF line ends, as an editor may leave them) goes through OpenSSL's
// reader and is the same key, and a file that is not an Ed25519 key is refused either way.
TEST(MoonChain, KeyFilesInAnyPemLayoutAreTheSameKey) {
  TmpDir t;
  auto first = chain::MoonKey::load_or_create(t.path());
  ASSERT_TRUE(first) << first.error().describe();
  auto crlf = [](const fs::path& p) {
    std::ifstream in(p);
    std::string text, line;
    while (std::getline(in, line)) text += line + "\r\n";
    std::ofstream(p, std::ios::trunc) << text;
  };
  crlf(t.path() / "moon.key");
  crlf(t.path() / "moon.pub");
  auto again = chain::MoonKey::load_or_create(t.path());
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->id(), first->id());
  auto cp = again->sign(1, std::string(64, 'a'), "2026-12-01T00:00:00.000000Z");
  ASSERT_TRUE(cp);
  EXPECT_TRUE(first->verify(*cp));
  std::ofstream(t.path() / "moon.pub", std::ios::trunc) << "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
  EXPECT_FALSE(chain::MoonKey::load_or_create(t.path()));
}

// The private key in a PEM text, read by OpenSSL (nullptr when it cannot).
EVP_PKEY* openssl_private_key(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return key;
}

// OpenSSL's Ed25519 signature of `msg` by `key` (deterministic), in base64 by OpenSSL's own
// encoder: what a checkpoint signed with the same key must carry, byte for byte.
void openssl_signature_b64(EVP_PKEY* key, const std::string& msg, std::string* out) {
  unsigned char sig[64];
  size_t len = sizeof sig;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const int init = EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key);
  const auto* data = reinterpret_cast<const unsigned char*>(msg.data());
  const int sign = init == 1 ? EVP_DigestSign(ctx, sig, &len, data, msg.size()) : 0;
  EVP_MD_CTX_free(ctx);
  ASSERT_EQ(init, 1);
  ASSERT_EQ(sign, 1);
  unsigned char b64[89];
  ASSERT_EQ(EVP_EncodeBlock(b64, sig, static_cast<int>(len)), 88);
  out->assign(reinterpret_cast<const char*>(b64), 88);
}

// Checkpoints are signed with libsodium (issue #16: no OpenSSL provider start-up in every
// process that stores events) and verified with OpenSSL, as a third party does: the signature
// must be byte for byte the one OpenSSL makes with moon.key (Ed25519 is deterministic), for a
// key OpenSSL generated and for one read back, and a moon.pub deleted since is written again
// as the same public key.
TEST(MoonChain, SignaturesAreOpenSslsOwnForTheSameKey) {
  TmpDir t;
  auto created = chain::MoonKey::load_or_create(t.path());
  ASSERT_TRUE(created) << created.error().describe();
  auto loaded = chain::MoonKey::load_or_create(t.path());
  ASSERT_TRUE(loaded) << loaded.error().describe();
  EXPECT_EQ(loaded->id(), created->id());

  std::ifstream key_in(t.path() / "moon.key");
  const std::string pem((std::istreambuf_iterator<char>(key_in)), std::istreambuf_iterator<char>());
  EVP_PKEY* key = openssl_private_key(pem);
  ASSERT_NE(key, nullptr);
  for (int64_t seq : {1, 2, 1000}) {
    const std::string hash = sha256_hex("event " + std::to_string(seq));
    const std::string time = "2026-12-01T00:00:0" + std::to_string(seq % 10) + ".000000Z";
    const std::string msg = chain::checkpoint_message(seq, hash, time);
    std::string want;
    ASSERT_NO_FATAL_FAILURE(openssl_signature_b64(key, msg, &want));
    for (const auto* k : {&*created, &*loaded}) {
      auto cp = k->sign(seq, hash, time);
      ASSERT_TRUE(cp) << cp.error().describe();
      EXPECT_EQ(cp->signature, want) << seq;
      EXPECT_EQ(cp->key_id, created->id());
      EXPECT_TRUE(created->verify(*cp));
      auto forged = *cp;
      forged.seq += 1;
      EXPECT_FALSE(created->verify(forged));
    }
  }
  EVP_PKEY_free(key);

  std::ifstream pub_in(t.path() / "moon.pub");
  const std::string pub((std::istreambuf_iterator<char>(pub_in)), std::istreambuf_iterator<char>());
  fs::remove(t.path() / "moon.pub");
  auto again = chain::MoonKey::load_or_create(t.path());
  ASSERT_TRUE(again) << again.error().describe();
  std::ifstream rewritten_in(t.path() / "moon.pub");
  const std::string rewritten((std::istreambuf_iterator<char>(rewritten_in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rewritten, pub);
  EXPECT_EQ(again->id(), created->id());
}

std::string pem_of_openssl(EVP_PKEY* key, bool private_half) {
  BIO* mem = BIO_new(BIO_s_mem());
  EXPECT_NE(mem, nullptr);
  const int ok = private_half ? PEM_write_bio_PrivateKey(mem, key, nullptr, nullptr, 0, nullptr, nullptr)
                              : PEM_write_bio_PUBKEY(mem, key);
  EXPECT_EQ(ok, 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(mem, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(mem);
  return out;
}

// The key files are written without libcrypto (issue #16: libsodium's key, the canonical PEM
// written directly): byte for byte what OpenSSL writes for the same key, and a key file
// OpenSSL wrote (as soyaos did before) is read as the same key, its moon.pub written as
// OpenSSL would.
TEST(MoonChain, KeyFilesAreByteForByteOpenSslsBothWays) {
  TmpDir t;
  auto created = chain::MoonKey::load_or_create(t.path());
  ASSERT_TRUE(created) << created.error().describe();
  const std::string key_pem = read_file(t.path() / "moon.key");
  const std::string pub_pem = read_file(t.path() / "moon.pub");
  EVP_PKEY* key = openssl_private_key(key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(EVP_PKEY_get_id(key), EVP_PKEY_ED25519);
  EXPECT_EQ(pem_of_openssl(key, true), key_pem);
  EXPECT_EQ(pem_of_openssl(key, false), pub_pem);
  EVP_PKEY_free(key);

  // OpenSSL's key, in a home of its own, without moon.pub.
  TmpDir old;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  EVP_PKEY* generated = nullptr;
  ASSERT_EQ(EVP_PKEY_keygen_init(ctx), 1);
  ASSERT_EQ(EVP_PKEY_keygen(ctx, &generated), 1);
  EVP_PKEY_CTX_free(ctx);
  {
    std::ofstream(old.path() / "moon.key") << pem_of_openssl(generated, true);
  }
  ASSERT_EQ(::chmod((old.path() / "moon.key").c_str(), 0600), 0);
  auto loaded = chain::MoonKey::load_or_create(old.path());
  ASSERT_TRUE(loaded) << loaded.error().describe();
  EXPECT_EQ(read_file(old.path() / "moon.pub"), pem_of_openssl(generated, false));
  unsigned char raw[32];
  size_t len = sizeof raw;
  ASSERT_EQ(EVP_PKEY_get_raw_public_key(generated, raw, &len), 1);
  EXPECT_EQ(loaded->id(), "ed25519:" + sha256_hex(std::string_view(reinterpret_cast<const char*>(raw), len)).substr(0, 16));
  // Its signatures are OpenSSL's (Ed25519 is deterministic) and verify.
  const std::string msg = chain::checkpoint_message(7, std::string(64, 'b'), "2026-12-01T00:00:07.000000Z");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(openssl_signature_b64(generated, msg, &want));
  auto cp = loaded->sign(7, std::string(64, 'b'), "2026-12-01T00:00:07.000000Z");
  ASSERT_TRUE(cp) << cp.error().describe();
  EXPECT_EQ(cp->signature, want);
  EXPECT_TRUE(loaded->verify(*cp));
  auto bad = *cp;
  bad.signature[10] = bad.signature[10] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(loaded->verify(bad));
  EVP_PKEY_free(generated);
}

TEST(MoonChain, TenWriterProcessesKeepOneValidChain) {
  TmpDir t;
  constexpr int kWriters = 10, kBatches = 20, kBatch = 5;
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto s = EventStore::open(t.path());  // the first ones race to create the key too
      if (!s) {
        std::fprintf(stderr, "writer %d: open: %s\n", w, s.error().describe().c_str());
        _exit(10);
      }
      for (int b = 0; b < kBatches; ++b) {
        std::vector<json> batch;
        for (int i = 0; i < kBatch; ++i) batch.push_back(event("dns_query", "W" + std::to_string(w), b * kBatch + i));
        if (!s->append(batch)) _exit(11);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  EXPECT_EQ(all(verify(t.path())), "");
  auto s = Store::open(t.path());
  auto report = s->verify_chain({});
  ASSERT_TRUE(report);
  EXPECT_EQ(report->events, kWriters * kBatches * kBatch);
  EXPECT_EQ(report->checkpoints, kWriters * kBatches);
}

TEST(MoonChain, OlderStoreIsChainedAtUpgrade) {
  TmpDir t;
  fill(t.path());
  // Back to schema 2: no chain columns, no checkpoints, no key, no head.
  tamper(t.path(), "ALTER TABLE events DROP COLUMN hash; ALTER TABLE events DROP COLUMN prev_hash; "
                   "DROP TABLE checkpoints; DROP TABLE chain_meta; ALTER TABLE flags DROP COLUMN origin; "
                   "DROP TABLE remote_origins; DROP TABLE flag_outbox; PRAGMA user_version=2");
  for (const char* f : {"moon.key", "moon.pub", "scope.head"}) fs::remove(t.path() / f);
  auto s = Store::open(t.path());
  ASSERT_TRUE(s) << s.error().describe();
  auto report = s->verify_chain({});
  ASSERT_TRUE(report);
  EXPECT_EQ(all(report->problems), "");
  EXPECT_EQ(report->chained_at_upgrade, 12);
  EXPECT_EQ(report->checkpoints, 1);
  // Appending continues the chain; an edit of an upgraded row is still named.
  auto es = EventStore::open(t.path());
  std::vector<json> one = {event("run_started", "R4", 0)};
  ASSERT_TRUE(es->append(one));
  EXPECT_EQ(all(verify(t.path())), "");
  tamper(t.path(), "UPDATE events SET json=replace(json, '\"n\":1', '\"n\":2') WHERE seq=2");
  EXPECT_TRUE(names(verify(t.path()), "seq 2 (", "edited"));
}

}  // namespace
}  // namespace soyaos::moon

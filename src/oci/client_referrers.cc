#include <string>
#include <vector>

#include "common/digest.h"
#include "oci/client_internal.h"
#include "oci/reference.h"

namespace soyaos::oci {
namespace {

using json = nlohmann::ordered_json;
using detail::error_text;
using detail::url_escape;

constexpr const char* kEmptyDigest = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

}  // namespace

Result<std::vector<Descriptor>> Client::referrers(const std::string& repo, const std::string& subject_digest,
                                                  const std::string& artifact_type, Skipped* skipped) {
  if (!valid_digest(subject_digest)) return make_error("referrers: " + subject_digest + " is not a sha256 digest");
  HttpRequest req;
  req.url = impl_->base + repo + "/referrers/" + subject_digest;
  if (!artifact_type.empty()) req.url += "?artifactType=" + url_escape(artifact_type);
  req.max_body = kMaxManifestBytes;
  req.headers.push_back(std::string("Accept: ") + kImageIndex);
  auto r = impl_->send(req, Impl::pull_scope(repo));
  if (!r) return r.error();
  std::string body;
  if (r->status == 200 && r->header("content-type").rfind(kImageIndex, 0) == 0) {
    body = std::move(r->body);
  } else if (r->status == 404 || r->status == 200) {
    // No referrers API (a 404, or something that is not an index): the tag schema.
    auto idx = get_manifest(repo, "sha256-" + subject_digest.substr(7), {kImageIndex});
    if (!idx) return idx.error();
    if (!*idx) return std::vector<Descriptor>();
    body = std::move((*idx)->bytes);
  } else {
    return make_error("GET " + req.url + ": " + error_text(*r));
  }
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("manifests") || !j["manifests"].is_array()) {
    return make_error("the referrers of " + subject_digest + " in " + repo + ": not an image index");
  }
  std::vector<Descriptor> out;
  Skipped local;
  Skipped& skip = skipped != nullptr ? *skipped : local;
  const auto& list = j["manifests"];
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (i >= kMaxReferrers) {
      skip.count += list.size() - i;
      break;
    }
    // One bad entry must not hide the others (a signature or a flag behind it).
    auto d = Descriptor::from_json(list[i], "manifests[" + std::to_string(i) + "]");
    if (!d) {
      if (++skip.count <= Skipped::kMaxNamed) skip.named.push_back(d.error().describe());
      continue;
    }
    if (!artifact_type.empty() && d->artifact_type != artifact_type) continue;
    out.push_back(std::move(*d));
  }
  return out;
}

Result<Descriptor> Client::push_referrer(const std::string& repo, const Descriptor& subject,
                                         const std::string& artifact_type, const std::string& blob,
                                         const std::string& blob_media_type, const json& annotations) {
  if (auto s = push_blob(repo, "{}", kEmptyDigest); !s) return s.error();
  const std::string blob_digest = "sha256:" + sha256_hex(blob);
  if (auto s = push_blob(repo, blob, blob_digest); !s) return s.error();
  json m = {{"schemaVersion", 2},
            {"mediaType", kImageManifest},
            {"artifactType", artifact_type},
            {"config", {{"mediaType", kEmptyMediaType}, {"digest", kEmptyDigest}, {"size", 2}}},
            {"layers", json::array({{{"mediaType", blob_media_type}, {"digest", blob_digest}, {"size", blob.size()}}})},
            {"subject", {{"mediaType", subject.media_type}, {"digest", subject.digest}, {"size", subject.size}}}};
  if (annotations.is_object() && !annotations.empty()) m["annotations"] = annotations;
  const std::string bytes = m.dump();
  Descriptor d;
  d.media_type = kImageManifest;
  d.digest = "sha256:" + sha256_hex(bytes);
  d.size = bytes.size();
  d.artifact_type = artifact_type;
  d.annotations = annotations.is_object() ? annotations : json::object();
  auto put = put_manifest(repo, d.digest, bytes, kImageManifest);
  if (!put) return put.error();
  if (put->subject_processed) return d;
  // The tag schema: the index tagged sha256-HEX lists the subject's referrers.
  const std::string tag = "sha256-" + subject.digest.substr(7);
  json index = {{"schemaVersion", 2}, {"mediaType", kImageIndex}, {"manifests", json::array()}};
  auto cur = get_manifest(repo, tag, {kImageIndex});
  if (!cur) return cur.error();
  if (*cur) {
    json j = json::parse((*cur)->bytes, nullptr, false);
    if (j.is_object() && j.contains("manifests") && j["manifests"].is_array()) index = std::move(j);
  }
  for (const auto& e : index["manifests"]) {
    if (e.is_object() && e.contains("digest") && e["digest"] == d.digest) return d;
  }
  index["manifests"].push_back(d.to_json());
  if (auto p = put_manifest(repo, tag, index.dump(), kImageIndex); !p) return p.error();
  return d;
}

}  // namespace soyaos::oci

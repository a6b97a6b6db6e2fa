#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "common/digest.h"
#include "oci/client_internal.h"
#include "oci/reference.h"

namespace soyaos::oci {
namespace {

using detail::error_text;
using detail::is_2xx;
using detail::is_redirect;
using detail::kMaxSmallBody;
using detail::retryable_status;
using detail::url_escape;

}  // namespace

Result<std::string> Client::Impl::upload_location(const HttpResponse& r, const std::string& from) {
  const std::string loc = r.header("location");
  if (loc.empty()) return make_error(registry + ": the upload answer has no Location");
  std::string url = resolve_url(from, loc);
  if (url.empty() || url_origin(url) != origin) {
    return make_error(registry + ": the upload Location " + loc + " leaves the registry; refused");
  }
  return url;
}

Status Client::Impl::upload(const std::string& repo, int fd, std::string_view bytes, uint64_t size, const std::string& digest) {
  last_transient = false;
  const std::string scope = push_scope(repo);
  HttpRequest start;
  start.method = "POST";
  start.url = base + repo + "/blobs/uploads/";
  start.max_body = kMaxSmallBody;
  auto r = send(start, scope);
  if (!r) return r.error();
  if (r->status != 202) return make_error("start the upload of " + digest + " to " + repo + ": " + error_text(*r));
  auto loc = upload_location(*r, start.url);
  if (!loc) return loc.error();
  std::string url = *loc;
  uint64_t chunk = options.chunk_size;
  if (const std::string min = r->header("oci-chunk-min-length"); !min.empty() && min.size() < 12 &&
                                                                 std::all_of(min.begin(), min.end(), ::isdigit)) {
    chunk = std::max<uint64_t>(chunk, std::stoull(min));
  }
  auto body_of = [&](HttpRequest& q, uint64_t off, uint64_t len) {
    if (fd >= 0) {
      q.body_fd = fd;
      q.body_offset = off;
      q.body_len = len;
    } else {
      q.body = bytes.substr(off, len);
    }
  };
  uint64_t sent = 0;
  if (chunk > 0 && size > chunk) {
    while (sent < size) {
      const uint64_t len = std::min(chunk, size - sent);
      HttpRequest patch;
      patch.method = "PATCH";
      patch.url = url;
      patch.max_body = kMaxSmallBody;
      patch.headers = {"Content-Type: application/octet-stream",
                       "Content-Range: " + std::to_string(sent) + "-" + std::to_string(sent + len - 1)};
      body_of(patch, sent, len);
      auto p = send(patch, scope, /*retry=*/false);  // a chunk is not idempotent
      if (!p) return p.error();
      if (p->status != 202) return make_error("upload a chunk of " + digest + " to " + repo + ": " + error_text(*p));
      auto next = upload_location(*p, url);
      if (!next) return next.error();
      url = *next;
      sent += len;
      ++stats.chunks;
      stats.bytes_uploaded += len;
    }
  }
  HttpRequest put;
  put.method = "PUT";
  put.url = url + (url.find('?') == std::string::npos ? "?" : "&") + "digest=" + url_escape(digest);
  put.max_body = kMaxSmallBody;
  put.headers = {"Content-Type: application/octet-stream"};
  if (sent < size) {
    body_of(put, sent, size - sent);
    stats.bytes_uploaded += size - sent;
  }
  auto p = send(put, scope, /*retry=*/false);
  if (!p) return p.error();
  if (p->status != 201) return make_error("finish the upload of " + digest + " to " + repo + ": " + error_text(*p));
  ++stats.blobs_uploaded;
  return {};
}

Status Client::Impl::upload_with_retries(const std::string& repo, int fd, std::string_view bytes, uint64_t size,
                           const std::string& digest) {
  for (int attempt = 0;; ++attempt) {
    auto s = upload(repo, fd, bytes, size, digest);
    if (s || attempt + 1 >= options.max_attempts) return s;
    const std::string& m = s.error().message;
    // A 5xx or 429 at any step, a lost upload session (404) or a transport error: the
    // whole upload again (a chunk cannot be replayed on its own).
    const bool retryable = m.find("HTTP 5") != std::string::npos || m.find("HTTP 429") != std::string::npos ||
                           m.find("HTTP 404") != std::string::npos || last_transient;
    if (!retryable) return s;
    backoff(attempt, nullptr);
  }
}

Result<bool> Client::blob_exists(const std::string& repo, const std::string& digest) {
  HttpRequest req;
  req.method = "HEAD";
  req.url = impl_->base + repo + "/blobs/" + digest;
  // A registry may redirect a blob HEAD to its storage: a redirect answer means it has it.
  auto r = impl_->send(req, Impl::pull_scope(repo));
  if (!r) return r.error();
  if (r->status == 200 || is_redirect(r->status)) return true;
  if (r->status == 404) return false;
  return make_error("HEAD " + req.url + ": " + error_text(*r));
}

Status Client::push_blob(const std::string& repo, std::string_view bytes, const std::string& digest) {
  auto has = blob_exists(repo, digest);
  if (!has) return has.error();
  if (*has) {
    ++impl_->stats.blobs_present;
    return {};
  }
  return impl_->upload_with_retries(repo, -1, bytes, bytes.size(), digest);
}

Status Client::push_blob_fd(const std::string& repo, int fd, uint64_t size, const std::string& digest,
                            const std::vector<std::string>& mount_from) {
  auto has = blob_exists(repo, digest);
  if (!has) return has.error();
  if (*has) {
    ++impl_->stats.blobs_present;
    return {};
  }
  for (const auto& from : mount_from) {
    if (from == repo) continue;
    HttpRequest req;
    req.method = "POST";
    req.url = impl_->base + repo + "/blobs/uploads/?mount=" + url_escape(digest) + "&from=" + url_escape(from);
    req.max_body = kMaxSmallBody;
    auto r = impl_->send(req, Impl::push_scope(repo) + " " + Impl::pull_scope(from), /*retry=*/false);
    if (!r) return r.error();
    if (r->status == 201) {
      ++impl_->stats.blobs_mounted;
      return {};
    }
    // 202: the registry opened an upload session instead; it is left to expire (the upload
    // below opens its own, which every registry accepts).
  }
  return impl_->upload_with_retries(repo, fd, {}, size, digest);
}

Result<std::string> Client::get_blob(const std::string& repo, const Descriptor& d, std::size_t max) {
  if (d.size > max) return make_error("blob " + d.digest + " is " + std::to_string(d.size) + " bytes, more than the " +
                                      std::to_string(max) + " allowed");
  std::string out;
  Sha256 h;
  HttpRequest req;
  std::string url = impl_->base + repo + "/blobs/" + d.digest;
  bool foreign = false;
  for (int hop = 0;; ++hop) {
    out.clear();
    req = HttpRequest{};
    req.url = url;
    req.max_body = kMaxSmallBody;
    req.sink = [&](std::string_view chunk, long) -> Status {
      if (out.size() + chunk.size() > d.size) return make_error("blob " + d.digest + ": more bytes than its descriptor's size");
      out.append(chunk);
      return {};
    };
    auto r = foreign ? impl_->http.perform(req) : impl_->send(req, Impl::pull_scope(repo));
    if (!r) return r.error();
    if (is_redirect(r->status) && hop < 5) {
      if (auto s = impl_->follow_blob_redirect(url, *r, foreign); !s) return s.error();
      continue;
    }
    if (!is_2xx(r->status)) return make_error("GET blob " + d.digest + " from " + repo + ": " + error_text(*r));
    break;
  }
  h.update(out);
  const std::string got = h.digest();
  if (out.size() != d.size || got != d.digest) {
    return make_error("blob " + d.digest + " from " + impl_->registry + "/" + repo +
                      ": the content does not match its digest (got " + got + ", " + std::to_string(out.size()) +
                      " bytes); refused");
  }
  impl_->stats.bytes_downloaded += out.size();
  return out;
}

Status Client::get_blob_to_fd(const std::string& repo, const Descriptor& d, int fd) {
  auto hasher = std::make_unique<Sha256>();
  uint64_t got = 0;
  // libcurl hands the body over in pieces of at most 16 KiB: they are written in batches of
  // 1 MiB (a 50 MiB layer took 3200 write(2) calls). `got` counts what was hashed; the batch
  // is flushed after every transfer, so the file holds exactly `got` bytes when a Range
  // request resumes it.
  constexpr std::size_t kWriteBatch = std::size_t{1} << 20;
  std::string pending;
  // The file holds exactly `in_file` bytes of the blob outside flush(). A batch whose write
  // fails part-way (ENOSPC, EFBIG past RLIMIT_FSIZE, EIO) is cut off again: the flush after
  // the transfer writes the same batch from that offset (not after its partial copy), and a
  // failed download leaves a clean prefix, never a torn batch.
  uint64_t in_file = 0;
  auto flush = [&]() -> Status {
    std::string_view left = pending;
    while (!left.empty()) {
      const ssize_t n = ::write(fd, left.data(), left.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const Error failed = errno_error("write the download file");
        const auto keep = static_cast<off_t>(in_file);
        if (::ftruncate(fd, keep) != 0 || ::lseek(fd, keep, SEEK_SET) != keep) {
          return errno_error("trim the download file after a failed write (" + failed.describe() + ")");
        }
        return failed;
      }
      left.remove_prefix(static_cast<size_t>(n));
    }
    in_file += pending.size();
    pending.clear();
    return {};
  };
  auto restart = [&]() -> Status {
    pending.clear();
    in_file = 0;
    if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) return errno_error("truncate the download file");
    hasher = std::make_unique<Sha256>();
    got = 0;
    return {};
  };
  if (auto s = restart(); !s) return s;
  std::string url = impl_->base + repo + "/blobs/" + d.digest;
  bool foreign = false;
  int hops = 0;
  for (int attempt = 0;;) {
    HttpRequest req;
    req.url = url;
    req.max_body = kMaxSmallBody;
    if (got > 0) req.headers.push_back("Range: bytes=" + std::to_string(got) + "-");
    bool first = true;
    req.sink = [&](std::string_view chunk, long status) -> Status {
      if (first) {
        first = false;
        if (got > 0 && status != 206) {  // the server sends it all again
          if (auto s = restart(); !s) return s;
        }
      }
      if (got + chunk.size() > d.size) return make_error("blob " + d.digest + ": more bytes than its descriptor's size");
      pending.append(chunk);
      hasher->update(chunk);
      got += chunk.size();
      return pending.size() >= kWriteBatch ? flush() : Status{};
    };
    bool transient = false;
    Result<HttpResponse> r = foreign ? impl_->http.perform(req, &transient) : impl_->send(req, Impl::pull_scope(repo), false);
    if (auto s = flush(); !s) return s;
    if (!r) {
      const bool may_retry = foreign ? transient : impl_->last_transient;
      if (may_retry && ++attempt < impl_->options.max_attempts && got < d.size) {
        if (got > 0) ++impl_->stats.resumed;
        impl_->backoff(attempt, nullptr);
        continue;
      }
      return r.error();
    }
    if (is_redirect(r->status) && ++hops <= 5) {
      if (auto s = impl_->follow_blob_redirect(url, *r, foreign); !s) return s.error();
      continue;
    }
    if (retryable_status(r->status) && ++attempt < impl_->options.max_attempts) {
      impl_->backoff(attempt, &*r);
      continue;
    }
    if (r->status == 416 && got > 0) {  // our Range is not satisfiable: start over
      if (auto s = restart(); !s) return s;
      if (++attempt < impl_->options.max_attempts) continue;
    }
    if (!is_2xx(r->status)) return make_error("GET blob " + d.digest + " from " + repo + ": " + error_text(*r));
    break;
  }
  const std::string digest = hasher->digest();
  if (got != d.size || digest != d.digest) {
    return make_error("blob " + d.digest + " from " + impl_->registry + "/" + repo +
                      ": the content does not match its digest (got " + digest + ", " + std::to_string(got) +
                      " of " + std::to_string(d.size) + " bytes); refused");
  }
  impl_->stats.bytes_downloaded += got;
  return {};
}

Result<std::optional<Fetched>> Client::get_manifest(const std::string& repo, const std::string& reference,
                                                    const std::vector<std::string>& accept) {
  HttpRequest req;
  req.url = impl_->base + repo + "/manifests/" + reference;
  req.max_body = kMaxManifestBytes;
  std::string acc = "Accept: ";
  for (std::size_t i = 0; i < accept.size(); ++i) acc += (i ? ", " : "") + accept[i];
  req.headers.push_back(acc);
  auto r = impl_->send(req, Impl::pull_scope(repo));
  if (!r) {
    if (r.error().message.find("larger than") != std::string::npos) {
      return make_error("the manifest " + repo + ":" + reference + " is larger than 4 MiB; refused");
    }
    return r.error();
  }
  if (r->status == 404) return std::optional<Fetched>();
  if (is_redirect(r->status)) {
    return make_error("GET " + req.url + ": the registry redirected a manifest request to " + r->header("location") +
                      "; only blob downloads may be redirected — refused");
  }
  if (!is_2xx(r->status)) return make_error("GET manifest " + repo + ":" + reference + ": " + error_text(*r));
  Fetched f;
  f.media_type = r->header("content-type");
  if (auto semi = f.media_type.find(';'); semi != std::string::npos) f.media_type.resize(semi);
  while (!f.media_type.empty() && f.media_type.back() == ' ') f.media_type.pop_back();
  if (std::find(accept.begin(), accept.end(), f.media_type) == accept.end()) {
    return make_error("the manifest " + repo + ":" + reference + " has media type \"" + f.media_type +
                      "\", not " + accept.front() + "; refused");
  }
  f.bytes = std::move(r->body);
  f.digest = "sha256:" + sha256_hex(f.bytes);
  if (valid_digest(reference) && f.digest != reference) {
    return make_error("the manifest fetched as " + repo + "@" + reference + " hashes to " + f.digest + "; refused");
  }
  if (const std::string dcd = r->header("docker-content-digest"); !dcd.empty() && valid_digest(dcd) && dcd != f.digest) {
    return make_error("the manifest " + repo + ":" + reference + " hashes to " + f.digest +
                      " but the registry says " + dcd + "; refused");
  }
  return std::optional<Fetched>(std::move(f));
}

Result<Client::Put> Client::put_manifest(const std::string& repo, const std::string& reference,
                                         const std::string& bytes, const std::string& media_type) {
  HttpRequest req;
  req.method = "PUT";
  req.url = impl_->base + repo + "/manifests/" + reference;
  req.max_body = kMaxSmallBody;
  req.headers.push_back("Content-Type: " + media_type);
  req.body = bytes;
  auto r = impl_->send(req, Impl::push_scope(repo));
  if (!r) return r.error();
  if (r->status != 201 && r->status != 200) return make_error("PUT manifest " + repo + ":" + reference + ": " + error_text(*r));
  Put p;
  p.digest = "sha256:" + sha256_hex(bytes);
  p.subject_processed = !r->header("oci-subject").empty();
  return p;
}
}  // namespace soyaos::oci

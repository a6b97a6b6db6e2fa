"""A TLS 1.3 client that opens with the ClientHello a current Chromium sends (issue #18: Chromium
clients must work through the gateway), then completes the handshake for real: X25519, the
three TLS 1.3 AEAD suites, the server's certificate chain verified against a CA bundle and its
CertificateVerify and Finished checked, one HTTP/1.1 exchange over the session.

The ClientHello is built the way BoringSSL builds Chromium's (Chrome 131): GREASE values
(0x?a?a) first among the cipher suites, supported groups, key shares and supported versions, a
GREASE extension first and another (one zero byte) last; an X25519MLKEM768 key share (1216
bytes: the gateway's OpenSSL does not know the group and takes the X25519 share), ALPN h2 and
http/1.1, ALPS (application_settings, 0x44cd) for h2, certificate compression (brotli), SCT
and OCSP requests, a 32-byte legacy session id (middlebox compatibility mode), the extensions
in a shuffled order (`pq=False`: the hello before Chrome 124, X25519 alone, small enough for
the padding extension), and — unless `ech=False` — ECH GREASE (encrypted_client_hello 0xfe0d, an
outer ECHClientHello with a random config id, a random X25519 `enc` and a random payload), which
Chromium sends on every connection without an ECH configuration. BoringSSL's padding extension
(0x0015) is added when the hello falls in its 256..511-byte window, as BoringSSL does.

Uses Debian's python3-cryptography (38) for X25519, AES-GCM, ChaCha20-Poly1305 and signatures;
everything else (records, key schedule) is here.
"""
import hashlib
import hmac
import os
import random
import socket
import struct

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.x509.oid import ExtensionOID

SUITES = {0x1301: (hashlib.sha256, 16, AESGCM), 0x1302: (hashlib.sha384, 32, AESGCM),
          0x1303: (hashlib.sha256, 32, ChaCha20Poly1305)}
SIG_SCHEMES = {0x0403: ("ec", hashes.SHA256), 0x0503: ("ec", hashes.SHA384), 0x0603: ("ec", hashes.SHA512),
               0x0804: ("pss", hashes.SHA256), 0x0805: ("pss", hashes.SHA384), 0x0806: ("pss", hashes.SHA512),
               0x0401: ("pkcs1", hashes.SHA256), 0x0501: ("pkcs1", hashes.SHA384), 0x0601: ("pkcs1", hashes.SHA512)}
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


class TlsFailure(Exception):
    pass


def u8(b):
    return struct.pack(">B", len(b)) + b


def u16(b):
    return struct.pack(">H", len(b)) + b


def u24(b):
    return struct.pack(">I", len(b))[1:] + b


def ext(kind, data):
    return struct.pack(">H", kind) + u16(data)


def grease_values(n):
    """N distinct GREASE code points (0x0a0a, 0x1a1a, ... 0xfafa), like BoringSSL's per-connection seeds."""
    picks = random.sample(range(16), n)
    return [(g << 12) | 0x0a00 | (g << 4) | 0x0a for g in picks]


def client_hello(sni, x25519_pub, ech=True, pq=True):
    g_cipher, g_group, g_version, g_ext1, g_ext2 = grease_values(5)
    ciphers = [g_cipher, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
               0x009c, 0x009d, 0x002f, 0x0035]
    name = sni.encode()
    shares = struct.pack(">H", g_group) + u16(b"\x00")
    if pq:
        mlkem_share = os.urandom(1184) + os.urandom(32)  # an ML-KEM-768 encapsulation key, then an X25519 share
        shares += struct.pack(">H", 0x11ec) + u16(mlkem_share)
    shares += struct.pack(">H", 0x001d) + u16(x25519_pub)
    groups = [g_group] + ([0x11ec] if pq else []) + [0x001d, 0x0017, 0x0018]
    middle = [
        ext(0x0000, u16(b"\x00" + u16(name))),                                  # server_name
        ext(0x0017, b""),                                                        # extended_master_secret
        ext(0xff01, b"\x00"),                                                    # renegotiation_info
        ext(0x000a, u16(b"".join(struct.pack(">H", g) for g in groups))),  # supported_groups
        ext(0x000b, u8(b"\x00")),                                                # ec_point_formats
        ext(0x0023, b""),                                                        # session_ticket
        ext(0x0010, u16(u8(b"h2") + u8(b"http/1.1"))),                           # ALPN
        ext(0x0005, b"\x01\x00\x00\x00\x00"),                                    # status_request (OCSP)
        ext(0x000d, u16(struct.pack(">8H", 0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601))),
        ext(0x0012, b""),                                                        # signed_certificate_timestamp
        ext(0x0033, u16(shares)),                                                # key_share
        ext(0x002d, u8(b"\x01")),                                                # psk_key_exchange_modes: psk_dhe_ke
        ext(0x002b, u8(struct.pack(">3H", g_version, 0x0304, 0x0303))),          # supported_versions
        ext(0x001b, u8(struct.pack(">H", 0x0002))),                              # compress_certificate: brotli
        ext(0x44cd, u16(u8(b"h2"))),                                             # application_settings (ALPS)
    ]
    if ech:
        # ECH GREASE (draft-ietf-tls-esni-22 6.2): outer, HKDF-SHA256 + AES-128-GCM, a random
        # config id, a random X25519 `enc`, a random payload of a plausible size.
        payload = os.urandom(random.choice([144, 176, 208, 240]))
        middle.append(ext(0xfe0d, b"\x00" + struct.pack(">HH", 0x0001, 0x0001) + os.urandom(1) +
                          u16(os.urandom(32)) + u16(payload)))
    random.shuffle(middle)  # Chromium permutes its extensions on every connection
    exts = [ext(g_ext1, b"")] + middle + [ext(g_ext2, b"\x00")]
    body = (b"\x03\x03" + os.urandom(32) + u8(os.urandom(32)) +
            u16(b"".join(struct.pack(">H", c) for c in ciphers)) + b"\x01\x00")
    unpadded = len(body) + 2 + sum(len(e) for e in exts) + 4
    if 0xff < unpadded < 0x200:  # BoringSSL's padding: hellos of 256..511 bytes grow to 512
        pad = max(0x200 - unpadded - 4, 1)
        exts.append(ext(0x0015, b"\x00" * pad))
    msg = body + u16(b"".join(exts))
    return b"\x01" + u24(msg), 0x0015 in [struct.unpack(">H", e[:2])[0] for e in exts]


def hkdf_extract(h, salt, ikm):
    return hmac.new(salt, ikm, h).digest()


def hkdf_expand_label(h, secret, label, context, length):
    full = b"tls13 " + label
    info = struct.pack(">H", length) + u8(full) + u8(context)
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(secret, block + info + bytes([i]), h).digest()
        out += block
        i += 1
    return out[:length]


class Keys:
    def __init__(self, h, key_len, aead, secret):
        self.aead = aead(hkdf_expand_label(h, secret, b"key", b"", key_len))
        self.iv = hkdf_expand_label(h, secret, b"iv", b"", 12)
        self.seq = 0

    def nonce(self):
        n = bytes(4) + struct.pack(">Q", self.seq)
        self.seq += 1
        return bytes(a ^ b for a, b in zip(self.iv, n))

    def seal(self, content_type, data):
        inner = data + bytes([content_type])
        header = b"\x17\x03\x03" + struct.pack(">H", len(inner) + 16)
        return header + self.aead.encrypt(self.nonce(), inner, header)

    def open(self, header, payload):
        inner = self.aead.decrypt(self.nonce(), payload, header).rstrip(b"\x00")
        if not inner:
            raise TlsFailure("an empty inner record")
        return inner[-1], inner[:-1]


class Records:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def read(self):
        while True:
            if len(self.buf) >= 5:
                n = struct.unpack(">H", self.buf[3:5])[0]
                if len(self.buf) >= 5 + n:
                    header, payload = self.buf[:5], self.buf[5:5 + n]
                    self.buf = self.buf[5 + n:]
                    return header, payload
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the peer closed the connection")
            self.buf += chunk


def pem_certificates(path):
    import base64
    out, lines, inside = [], [], False
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line == "-----BEGIN CERTIFICATE-----":
                inside, lines = True, []
            elif line == "-----END CERTIFICATE-----" and inside:
                inside = False
                try:
                    out.append(x509.load_der_x509_certificate(base64.b64decode("".join(lines))))
                except ValueError:
                    pass
            elif inside:
                lines.append(line)
    return out


def signed_by(cert, issuer):
    pub = issuer.public_key()
    try:
        if isinstance(pub, ec.EllipticCurvePublicKey):
            pub.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        elif isinstance(pub, rsa.RSAPublicKey):
            pub.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
        else:
            return False
        return True
    except Exception:  # noqa: BLE001 - any failure is "not signed by"
        return False


def verify_chain(chain, host, cafile):
    """The leaf names HOST and chains, by signatures, to a CA certificate in CAFILE."""
    leaf = chain[0]
    names = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    dns = names.get_values_for_type(x509.DNSName)
    if not any(n == host or (n.startswith("*.") and host.split(".", 1)[-1] == n[2:]) for n in dns):
        raise TlsFailure("the certificate names %s, not %s" % (dns, host))
    roots = pem_certificates(cafile)
    cur = leaf
    for _ in range(5):
        for root in roots:
            if root.subject == cur.issuer and signed_by(cur, root):
                return root
        nxt = [c for c in chain[1:] if c.subject == cur.issuer and signed_by(cur, c)]
        if not nxt:
            break
        cur = nxt[0]
    raise TlsFailure("the certificate of %s does not chain to a CA in %s" % (host, cafile))


def verify_signature(cert, scheme, signature, content):
    kind, alg = SIG_SCHEMES.get(scheme, (None, None))
    pub = cert.public_key()
    if kind == "ec" and isinstance(pub, ec.EllipticCurvePublicKey):
        pub.verify(signature, content, ec.ECDSA(alg()))
    elif kind == "pss" and isinstance(pub, rsa.RSAPublicKey):
        pub.verify(signature, content, padding.PSS(padding.MGF1(alg()), alg().digest_size), alg())
    elif kind == "pkcs1" and isinstance(pub, rsa.RSAPublicKey):
        pub.verify(signature, content, padding.PKCS1v15(), alg())
    else:
        raise TlsFailure("signature scheme 0x%04x for a %s key" % (scheme, type(pub).__name__))


def handshake_messages(buf):
    """Whole handshake messages at the front of BUF, and what remains."""
    msgs = []
    while len(buf) >= 4:
        n = struct.unpack(">I", b"\x00" + buf[1:4])[0]
        if len(buf) < 4 + n:
            break
        msgs.append((buf[0], buf[:4 + n]))
        buf = buf[4 + n:]
    return msgs, buf


class Session:
    """One TLS 1.3 connection opened with a Chromium ClientHello; `info` says what was agreed."""

    def __init__(self, sock, host, cafile, ech=True, pq=True):
        self.sock = sock
        self.records = Records(sock)
        self.info = {}
        self._handshake(host, cafile, ech, pq)

    def _handshake(self, host, cafile, ech, pq):
        priv = X25519PrivateKey.generate()
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
        hello, self.info["padded"] = client_hello(host, priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw),
                                                  ech, pq)
        self.info["hello_bytes"] = len(hello)
        self.sock.sendall(b"\x16\x03\x01" + u16(hello))
        header, sh = self._plain_record()
        if header[0] != 22 or sh[0] != 2:
            raise TlsFailure("expected a ServerHello, got record %d message %d" % (header[0], sh[0]))
        suite, share = self._server_hello(sh)
        h, key_len, aead = SUITES[suite]
        self.info["suite"] = "0x%04x" % suite
        shared = priv.exchange(X25519PublicKey.from_public_bytes(share))
        transcript = hello + sh
        zeros = bytes(h().digest_size)
        early = hkdf_extract(h, b"", zeros)
        derived = hkdf_expand_label(h, early, b"derived", h(b"").digest(), h().digest_size)
        hs = hkdf_extract(h, derived, shared)
        c_hs = hkdf_expand_label(h, hs, b"c hs traffic", h(transcript).digest(), h().digest_size)
        s_hs = hkdf_expand_label(h, hs, b"s hs traffic", h(transcript).digest(), h().digest_size)
        server = Keys(h, key_len, aead, s_hs)
        pending, chain, finished = b"", [], False
        while not finished:
            header, payload = self.records.read()
            if header[0] == 20:
                continue  # the middlebox-compatibility ChangeCipherSpec
            if header[0] == 21:
                raise TlsFailure("alert %s" % payload.hex())
            if header[0] != 23:
                raise TlsFailure("unexpected record type %d" % header[0])
            kind, data = server.open(header, payload)
            if kind == 21:
                raise TlsFailure("alert %s" % data.hex())
            if kind != 22:
                raise TlsFailure("inner type %d before Finished" % kind)
            msgs, pending = handshake_messages(pending + data)
            for mtype, msg in msgs:
                if mtype == 8:  # EncryptedExtensions
                    self.info["alpn"] = self._alpn(msg[4:])
                elif mtype == 11:  # Certificate
                    chain = self._certificates(msg[4:])
                    root = verify_chain(chain, host, cafile)
                    self.info["issuer"] = chain[0].issuer.rfc4514_string()
                    self.info["root"] = root.subject.rfc4514_string()
                elif mtype == 15:  # CertificateVerify
                    scheme, sig = struct.unpack(">H", msg[4:6])[0], msg[8:]
                    content = b" " * 64 + b"TLS 1.3, server CertificateVerify\x00" + h(transcript).digest()
                    verify_signature(chain[0], scheme, sig, content)
                elif mtype == 20:  # Finished
                    key = hkdf_expand_label(h, s_hs, b"finished", b"", h().digest_size)
                    if not hmac.compare_digest(msg[4:], hmac.new(key, h(transcript).digest(), h).digest()):
                        raise TlsFailure("the server's Finished does not verify")
                    finished = True
                elif mtype == 25:
                    raise TlsFailure("a compressed certificate (brotli is not implemented here)")
                else:
                    raise TlsFailure("unexpected handshake message %d" % mtype)
                transcript += msg
        if not chain:
            raise TlsFailure("no certificate")
        derived = hkdf_expand_label(h, hs, b"derived", h(b"").digest(), h().digest_size)
        master = hkdf_extract(h, derived, zeros)
        c_ap = hkdf_expand_label(h, master, b"c ap traffic", h(transcript).digest(), h().digest_size)
        s_ap = hkdf_expand_label(h, master, b"s ap traffic", h(transcript).digest(), h().digest_size)
        key = hkdf_expand_label(h, c_hs, b"finished", b"", h().digest_size)
        verify = hmac.new(key, h(transcript).digest(), h).digest()
        client = Keys(h, key_len, aead, c_hs)
        self.sock.sendall(b"\x14\x03\x03\x00\x01\x01" + client.seal(22, b"\x14" + u24(verify)))
        self.client = Keys(h, key_len, aead, c_ap)
        self.server = Keys(h, key_len, aead, s_ap)

    def _plain_record(self):
        header, payload = self.records.read()
        if header[0] == 21:
            raise TlsFailure("alert %s" % payload.hex())
        return header, payload

    def _server_hello(self, sh):
        body = sh[4:]
        if body[2:34] == HRR_RANDOM:
            raise TlsFailure("a HelloRetryRequest (the X25519 share was not taken)")
        sid_len = body[34]
        pos = 35 + sid_len
        suite = struct.unpack(">H", body[pos:pos + 2])[0]
        pos += 3
        end = pos + 2 + struct.unpack(">H", body[pos:pos + 2])[0]
        pos += 2
        version, share = None, None
        while pos < end:
            kind, n = struct.unpack(">HH", body[pos:pos + 4])
            data = body[pos + 4:pos + 4 + n]
            pos += 4 + n
            if kind == 0x002b:
                version = struct.unpack(">H", data)[0]
            elif kind == 0x0033:
                group = struct.unpack(">H", data[:2])[0]
                if group != 0x001d:
                    raise TlsFailure("the server chose group 0x%04x" % group)
                share = data[4:]
        if version != 0x0304 or share is None or suite not in SUITES:
            raise TlsFailure("not TLS 1.3 with X25519 (version %s, suite 0x%04x)" % (version, suite))
        return suite, share

    @staticmethod
    def _alpn(body):
        pos, end = 2, 2 + struct.unpack(">H", body[:2])[0]
        while pos < end:
            kind, n = struct.unpack(">HH", body[pos:pos + 4])
            if kind == 0x0010:
                return body[pos + 7:pos + 7 + body[pos + 6]].decode()
            pos += 4 + n
        return None

    @staticmethod
    def _certificates(body):
        pos = 1 + body[0]  # the request context
        end = pos + 3 + struct.unpack(">I", b"\x00" + body[pos:pos + 3])[0]
        pos += 3
        chain = []
        while pos < end:
            n = struct.unpack(">I", b"\x00" + body[pos:pos + 3])[0]
            chain.append(x509.load_der_x509_certificate(body[pos + 3:pos + 3 + n]))
            pos += 3 + n
            pos += 2 + struct.unpack(">H", body[pos:pos + 2])[0]  # the entry's extensions
        return chain

    def send(self, data):
        self.sock.sendall(self.client.seal(23, data))

    def read_all(self, limit=1 << 20):
        """Application data until the server closes (close_notify or EOF)."""
        out = b""
        while len(out) < limit:
            try:
                header, payload = self.records.read()
            except EOFError:
                break
            if header[0] != 23:
                raise TlsFailure("unexpected record type %d" % header[0])
            kind, data = self.server.open(header, payload)
            if kind == 23:
                out += data
            elif kind == 21:
                break  # close_notify
            # 22: NewSessionTicket and other post-handshake messages
        return out


def request(host, port, cafile, raw_request, ech=True, pq=True, timeout=10, address=None):
    """Connects (to ADDRESS, default HOST), handshakes with a Chromium ClientHello naming HOST,
    sends RAW_REQUEST (one HTTP/1.1 request with Connection: close), returns (session info,
    the response bytes)."""
    with socket.create_connection((address or host, port), timeout=timeout) as s:
        t = Session(s, host, cafile, ech, pq)
        t.send(raw_request)
        return t.info, t.read_all()

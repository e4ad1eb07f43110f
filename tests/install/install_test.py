"""Installs deltakv into a temporary prefix (`cmake --install`) and builds an engine outside the
tree against the installed files, with pkg-config and with find_package(deltakv); both run
against the installed sidecar: they attach a rank, and store, look up and reload KV blocks in
its pool (the second engine process reloads the first one's blocks), comparing every byte.
Also checks that libdeltakv.so has a versioned SONAME and exports only deltakv_* symbols.

Run: python3 tests/install/install_test.py --build-dir build
"""
import argparse, json, os, subprocess, sys, tempfile, time, unittest, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = None


def sh(*args, env=None, cwd=None):
    p = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


class InstalledTree(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.prefix = os.path.join(cls.tmp.name, "prefix")
        sh("cmake", "--install", BUILD, "--prefix", cls.prefix)
        cls.libdir = os.path.join(cls.prefix, "lib")
        cls.lib = os.path.join(cls.libdir, "libdeltakv.so")

    def test_layout(self):
        for rel in ("include/deltakv/deltakv.h", "include/deltakv/deltakv_kv.h",
                    "include/deltakv/deltakv_base.h", "bin/deltakv",
                    "lib/pkgconfig/deltakv.pc", "lib/cmake/deltakv/deltakvConfig.cmake",
                    "lib/cmake/deltakv/deltakvConfigVersion.cmake"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, rel)), rel)
        self.assertTrue(os.path.islink(self.lib))

    def test_soname_and_exports(self):
        dyn = sh("readelf", "-d", self.lib)
        self.assertIn("Library soname: [libdeltakv.so.1]", dyn)
        syms = sh("nm", "-D", "--defined-only", self.lib).split("\n")
        names = [l.split()[-1] for l in syms if l.strip()]
        self.assertGreater(len(names), 30)
        others = [n for n in names if not n.startswith("deltakv_")]
        self.assertEqual(others, [], "libdeltakv.so exports more than the C ABI")
        for want in ("deltakv_engine_create", "deltakv_kv_client_open", "deltakv_kv_store"):
            self.assertIn(want, names)

    def build_with_pkg_config(self):
        out = os.path.join(self.tmp.name, "engine_pc")
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(self.libdir, "pkgconfig"))
        flags = sh("pkg-config", "--cflags", "--libs", "deltakv", env=env).split()
        sh("cc", "-std=c99", "-Wall", "-Werror", os.path.join(HERE, "outside_engine.c"), *flags,
           f"-Wl,-rpath,{self.libdir}", "-o", out)
        return out

    def build_with_find_package(self):
        bdir = os.path.join(self.tmp.name, "consumer-build")
        sh("cmake", "-S", os.path.join(HERE, "consumer"), "-B", bdir,
           f"-DCMAKE_PREFIX_PATH={self.prefix}",
           f"-DOUTSIDE_ENGINE_SOURCE={os.path.join(HERE, 'outside_engine.c')}")
        sh("cmake", "--build", bdir)
        return os.path.join(bdir, "outside_engine")

    def test_outside_engines_against_a_real_sidecar(self):
        engines = [self.build_with_pkg_config(), self.build_with_find_package()]
        for e in engines:
            self.assertIn("libdeltakv.so.1", sh("ldd", e))
        work = self.tmp.name
        shm = f"deltakv-install-{os.getpid()}"
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("t0ken\n")
        port_file = os.path.join(work, "port")
        block = 4096
        log = open(os.path.join(work, "sidecar.log"), "w")
        self.addCleanup(log.close)
        sidecar = subprocess.Popen(
            [os.path.join(self.prefix, "bin", "deltakv"), "sidecar", "--listen", "127.0.0.1:0",
             "--port-file", port_file, "--token-file", token, "--shm-name", shm,
             "--kv-block-bytes", str(block), "--kv-capacity-slots", "64",
             "--state-dir", os.path.join(work, "state")],
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            port = ""
            for _ in range(200):
                if os.path.exists(port_file):
                    with open(port_file) as f:
                        port = f.read().strip()
                    if port:
                        break
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port}"
            stored = []
            for e in engines:
                p = subprocess.Popen([e, shm, str(block)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                first = p.stdout.readline()
                if not first.startswith("attached"):
                    p.stdin.close()
                    self.fail(f"{e}: {first}{p.stderr.read()}")
                self.assertIn("version=v1", first)
                self.assertIn("abi=1", first)
                status = ""
                for _ in range(100):  # the sidecar sees the rank
                    status = urllib.request.urlopen(url + "/v1/status").read().decode()
                    if str(p.pid) in status:
                        break
                    time.sleep(0.05)
                self.assertIn(str(p.pid), status)
                kv = p.stdout.readline().split()
                stored.append(int(kv[1].split("=")[1]))
                self.assertEqual(kv[2:], ["hits=4", "reloaded=4"])
                out, err = p.communicate("\n", timeout=30)
                self.assertEqual(p.returncode, 0, err)
            # The second engine process finds the first one's blocks in the sidecar's pool.
            self.assertEqual(stored, [4, 0])
        finally:
            sidecar.terminate()
            sidecar.wait(timeout=30)
            # The sidecar keeps its segments for engines across restarts; the test removes them.
            for name in os.listdir("/dev/shm"):
                if name.startswith(shm):
                    os.remove(os.path.join("/dev/shm", name))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build_dir)
    unittest.main(argv=[sys.argv[0], *rest])

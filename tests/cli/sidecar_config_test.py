"""Tests of `deltakv sidecar --config`: every key accepted, each kind of bad value refused with
a message naming the key, flags over the file, --print-config, and the README's key table.

Run: python3 tests/cli/sidecar_config_test.py --deltakv build/sidecar/deltakv
"""
import argparse, json, os, re, subprocess, sys, tempfile, unittest

DELTAKV = None
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")

# A valid value for every key; the test fails when the sidecar has a key missing here.
GOOD = {
    "listen": "127.0.0.1:0", "token": "t0ken-secret", "token_file": None, "shm_name": "dkv-cfg",
    "serving_cores": "0-1", "decoder": "libzstd", "state_dir": "/tmp/x", "max_body_bytes": 8192,
    "plan_buffer_bytes": 1 << 20, "decode_threads": 2, "volume_store": "/tmp/vols",
    "http_ca_file": None, "http_timeout": 5, "http_total_timeout": 60, "http_attempts": 2,
    "verify_checkpoint": "/tmp/ckpt", "scrub_interval_s": 1.5, "scrub_rate_gbps": 0.5,
    "port_file": "/tmp/port", "kv_block_bytes": 4096, "kv_capacity_slots": 8,
    "kv_host_fraction": 0.0, "kv_hugepages": True, "kv_numa_node": "auto",
    "kv_gpu_pci_bus_id": "0000:3b:00.0", "group": "g", "node": "a", "group_members": "a,b",
    "topology": "/tmp/topology.json",
    "etcd_endpoints": "http://127.0.0.1:2379", "group_prepare_timeout_ms": 1000,
    "group_in_doubt_timeout_ms": 0, "group_commit_margin_ms": 10,
    "group_report_timeout_ms": 100, "group_decision_poll_ms": 50, "peer_url": "http://10.0.0.7:8470", "group_token_file": None,
    "log_format": "json", "shutdown_timeout_s": 5,
}


class SidecarConfigTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.readable = os.path.join(self.tmp.name, "readable")
        with open(self.readable, "w") as f:
            f.write("secret-token-contents\n")

    def tearDown(self):
        self.tmp.cleanup()

    def run_sidecar(self, config, *flags, env=None):
        path = os.path.join(self.tmp.name, "sidecar.json")
        with open(path, "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
        e = {k: v for k, v in os.environ.items() if not k.startswith("DELTAKV_")}
        e.update(env or {})
        return subprocess.run([DELTAKV, "sidecar", "--config", path, *flags, "--print-config"],
                              capture_output=True, text=True, timeout=30, env=e)

    def good(self):
        g = dict(GOOD)
        g["token_file"] = g["http_ca_file"] = g["group_token_file"] = self.readable
        return g

    def test_every_key_is_accepted_and_printed(self):
        p = self.run_sidecar(self.good())
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual(set(out), set(GOOD))  # every key, and only keys
        for key, value in self.good().items():
            if key != "token":
                self.assertEqual(out[key], value, key)
        self.assertEqual(out["token"], "<redacted>")
        self.assertNotIn("t0ken-secret", p.stdout)
        self.assertNotIn("secret-token-contents", p.stdout)

    def test_keys_match_flags(self):
        help_text = subprocess.run([DELTAKV, "sidecar", "--help"], capture_output=True,
                                   text=True, timeout=30).stdout
        flags = set(re.findall(r"^\s+(--[a-z][a-z0-9-]+)", help_text, re.M))
        keys = {"--" + k.replace("_", "-") for k in GOOD}
        self.assertEqual(flags - keys,
                         {"--config", "--print-config", "--config-keys-markdown"})
        self.assertEqual(keys - flags, set())

    def test_flags_win_over_file(self):
        p = self.run_sidecar({"http_attempts": 7, "shm_name": "from-file", "kv_hugepages": False},
                             "--http-attempts", "9", "--kv-hugepages")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual((out["http_attempts"], out["shm_name"], out["kv_hugepages"]),
                         (9, "from-file", True))
        # The file is checked whole: a bad value is refused even where a flag overrides it.
        for config, flag, value in (({"http_attempts": 0}, "--http-attempts", "3"),
                                    ({"shm_name": 5}, "--shm-name", "a"),
                                    ({"log_format": "xml"}, "--log-format", "json"),
                                    ({"token_file": "/no/such"}, "--token-file", self.readable)):
            p = self.run_sidecar(config, flag, value)
            self.assertEqual(p.returncode, 2, (config, p.stderr))
            self.assertIn("key '" + next(iter(config)) + "'", p.stderr)

    def test_token_sources(self):
        other = os.path.join(self.tmp.name, "other")
        with open(other, "w") as f:
            f.write("from-the-other-file\n")
        # --token wins over the file's token_file, --token-file over its token; the sidecar
        # shows which one by the token it would serve (--print-config redacts it: compare the
        # effective token_file instead).
        p = self.run_sidecar({"token_file": self.readable}, "--token", "flag-token")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["token_file"], "")
        p = self.run_sidecar({"token": "file-token"}, "--token-file", other)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual((out["token_file"], out["token"]), (other, ""))
        p = self.run_sidecar({}, "--token", "a", "--token-file", other)
        self.assertEqual(p.returncode, 2)
        self.assertIn("give one of them", p.stderr)
        # $DELTAKV_TOKEN only when neither is given.
        p = self.run_sidecar({"token_file": other}, env={"DELTAKV_TOKEN": "from-env"})
        self.assertEqual(json.loads(p.stdout)["token"], "")
        p = self.run_sidecar({}, env={"DELTAKV_TOKEN": "from-env"})
        self.assertEqual(json.loads(p.stdout)["token"], "<redacted>")

    def test_file_wins_over_environment(self):
        env = {"DELTAKV_VOLUME_STORE": "/from/env"}
        self.assertEqual(json.loads(self.run_sidecar({}, env=env).stdout)["volume_store"], "/from/env")
        p = self.run_sidecar({"volume_store": "/from/file"}, env=env)
        self.assertEqual(json.loads(p.stdout)["volume_store"], "/from/file")

    def refused(self, config, *texts, flags=()):
        p = self.run_sidecar(config, *flags)
        self.assertEqual(p.returncode, 2, (config, p.stdout, p.stderr))
        self.assertEqual(p.stdout, "")
        for t in texts:
            self.assertIn(t, p.stderr)

    def test_token_files_hold_one_token(self):
        # Surrounding whitespace and line breaks are ignored; a file with no token, or with more
        # than one word or line, is refused at start-up (and by --print-config).
        path = os.path.join(self.tmp.name, "token")
        for text in ("tok-123\n", "  tok-123  \r\n", "\n\ttok-123\n\n"):
            with open(path, "w") as f:
                f.write(text)
            for key in ("token_file", "group_token_file"):
                p = self.run_sidecar({key: path})
                self.assertEqual(p.returncode, 0, (text, key, p.stderr))
        for text, why in (("", "holds no token (empty or only whitespace)"),
                          (" \n\t\n", "holds no token (empty or only whitespace)"),
                          ("tok-123\nsecond\n", "must hold one token on one line"),
                          ("tok 123\n", "must hold one token on one line")):
            with open(path, "w") as f:
                f.write(text)
            for key in ("token_file", "group_token_file"):
                self.refused({key: path}, f"key '{key}': token file '{path}' {why}")
        self.refused({"token": "tok 123"}, "key 'token': a bearer token cannot hold spaces")

    def test_listen_takes_an_ipv6_address_in_brackets(self):
        for listen in ("[::1]:8470", "[::]:0", "[fe80::1%eth0]:80", "::1:8470", ":8470"):
            g = self.good()
            g["listen"] = listen
            p = self.run_sidecar(g)
            self.assertEqual(p.returncode, 0, f"{listen}: {p.stderr}")
            self.assertEqual(json.loads(p.stdout)["listen"], listen)

    def test_bad_values_are_refused_naming_the_key(self):
        self.refused({"no_such_key": 1}, "key 'no_such_key': unknown key")
        self.refused({"config": "x"}, "key 'config': unknown key")
        self.refused({"http_attempts": "3"}, "key 'http_attempts': must be a non-negative integer")
        self.refused({"http_attempts": -1}, "key 'http_attempts': must be a non-negative integer")
        self.refused({"http_attempts": 1.5}, "key 'http_attempts': must be a non-negative integer")
        self.refused({"listen": 8470}, "key 'listen': must be a string")
        self.refused({"kv_hugepages": "yes"}, "key 'kv_hugepages': must be a boolean")
        self.refused({"scrub_rate_gbps": "1"}, "key 'scrub_rate_gbps': must be a number")
        self.refused({"kv_numa_node": [1]}, "key 'kv_numa_node': must be an integer or \"auto\"")
        # Ranges, the same as the flags'.
        self.refused({"http_attempts": 0}, "key 'http_attempts': must be 1..100, not 0")
        self.refused({"plan_buffer_bytes": 1}, "key 'plan_buffer_bytes': must be 262144..")
        self.refused({"decode_threads": 257}, "key 'decode_threads': must be 0..256")
        self.refused({"kv_host_fraction": 1.5}, "key 'kv_host_fraction': must be 0..1")
        self.refused({"scrub_interval_s": -1}, "key 'scrub_interval_s': must be 0..")
        self.refused({"group_prepare_timeout_ms": 99}, "key 'group_prepare_timeout_ms': must be 100..")
        self.refused({"shutdown_timeout_s": 0}, "key 'shutdown_timeout_s': must be 1..3600")
        # Choices, formats and files.
        self.refused({"log_format": "xml"}, "key 'log_format': must be one of text, json, not 'xml'")
        self.refused({"decoder": "fast"}, "key 'decoder': must be one of")
        self.refused({"listen": "nowhere"}, "key 'listen': must be HOST:PORT")
        for bad in ("[::1]", "[::1]x:80", "[]:80", "[[::1]]:80", "a]:80", "[::1:80", "h:65536",
                    " 127.0.0.1:80", "127.0.0.1:0:80", "no such:80"):
            self.refused({"listen": bad},
                         f"key 'listen': must be HOST:PORT or [IPV6]:PORT with a port 0..65535, "
                         f"not '{bad}'")
        self.refused({"serving_cores": "3-1"}, "key 'serving_cores': bad cpu range")
        self.refused({"kv_numa_node": "near"}, "key 'kv_numa_node': must be a node number or 'auto'")
        self.refused({"token_file": "/no/such/file"}, "key 'token_file': cannot read")
        self.refused({"http_ca_file": "/no/such/ca.pem"}, "key 'http_ca_file': cannot read")
        # Not an object, not JSON.
        self.refused([1, 2], "is not a JSON object")
        self.refused("{", "is not valid JSON")
        # The same checks on flags name the flag.
        self.refused({}, "--http-attempts: must be 1..100, not 0", flags=("--http-attempts", "0"))
        self.refused({}, "--log-format: must be one of text, json", flags=("--log-format", "x"))
        self.refused({}, "--token-file: cannot read", flags=("--token-file", "/no/such"))
        self.refused({}, "must be http://host:port", flags=("--peer-url", "https://a:1"))
        self.refused({"peer_url": "http://a"}, "must be http://host:port")
        # The KV pool is sized by slots or by a fraction of host RAM, not both.
        self.refused({"kv_block_bytes": 4096, "kv_capacity_slots": 8, "kv_host_fraction": 0.25},
                     "both size the KV pool")
        self.refused({}, "both size the KV pool",
                     flags=("--kv-block-bytes", "4096", "--kv-capacity-slots", "8",
                            "--kv-host-fraction", "0.1"))
        # A pool size without a block size would be ignored: refused instead.
        self.refused({}, "--kv-capacity-slots sizes a KV pool, which needs --kv-block-bytes",
                     flags=("--kv-capacity-slots", "8"))
        self.refused({"kv_host_fraction": 0.1},
                     "--kv-host-fraction sizes a KV pool, which needs --kv-block-bytes")
        # The ranges are the pool's own limits.
        self.refused({}, "kv-block-bytes", flags=("--kv-block-bytes", str(2**30 + 1),
                                                  "--kv-capacity-slots", "1"))
        self.refused({}, "kv-capacity-slots", flags=("--kv-block-bytes", "4096",
                                                     "--kv-capacity-slots", str(2**32 - 1)))

    def test_readme_table_is_the_code_table(self):
        table = subprocess.run([DELTAKV, "sidecar", "--config-keys-markdown"], capture_output=True,
                               text=True, timeout=30, check=True).stdout
        with open(README) as f:
            readme = f.read()
        m = re.search(r"<!-- sidecar-config-keys:begin -->\n(.*?)<!-- sidecar-config-keys:end -->",
                      readme, re.S)
        self.assertIsNotNone(m, "README has no sidecar config key table")
        self.assertEqual(m.group(1), table,
                         "README's table is stale: paste `deltakv sidecar --config-keys-markdown`")
        for key in GOOD:
            self.assertIn(f"| `{key}` |", table)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)

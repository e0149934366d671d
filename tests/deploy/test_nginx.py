"""deploy/nginx.conf: streaming-friendly settings, and `nginx -t` when nginx is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
CERT, KEY = "/etc/nginx/tls/treespec.crt", "/etc/nginx/tls/treespec.key"


class TestNginxConf:
    def test_streaming_directives(self):
        """SSE needs unbuffered proxying, long reads and HTTP/1.1 keepalive upstreams."""
        text = CONF.read_text()
        for directive in ("proxy_buffering off;", "proxy_read_timeout 3600s;", "proxy_http_version 1.1;",
                          "keepalive 64;", "proxy_pass_header X-Accel-Buffering;", "ssl_certificate "):
            assert directive in text

    @pytest.mark.skipif(not os.environ.get("TREESPEC_CI") and (shutil.which("nginx") is None or shutil.which("openssl") is None),
                        reason="nginx or openssl not installed (apt-get install nginx openssl); .ci/run installs both")
    def test_nginx_accepts_config(self, tmp_path):
        """`nginx -t` accepts the file with a freshly generated self-signed certificate."""
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", str(tmp_path / "k"), "-out", str(tmp_path / "c")],
                       check=True, capture_output=True)
        conf = tmp_path / "nginx.conf"
        conf.write_text(CONF.read_text().replace(CERT, str(tmp_path / "c")).replace(KEY, str(tmp_path / "k")))
        out = subprocess.run(["nginx", "-t", "-p", str(tmp_path), "-c", str(conf), "-e", "stderr"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr

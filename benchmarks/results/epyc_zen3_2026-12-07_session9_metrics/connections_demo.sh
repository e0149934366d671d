#!/bin/bash
# Real `treespec up` with max_connections=3 and header_timeout_s=2: three idle connections fill the cap, a
# fourth is closed at accept, the timer closes the three; then /metrics' connection counters.
set -u
cd "$(dirname "$0")/../../.."
date -u; lscpu | grep 'Model name'; git log --oneline -1
.venv/bin/treespec up --set max_connections=3 --set header_timeout_s=2 --set log_dir=/tmp/treespec_conn_demo_logs \
  > /tmp/treespec_conn_demo_up.out 2>&1 &
UP=$!
for i in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 1; done
echo "health after ${i}s"
.venv/bin/python - <<'PY'
import socket, time
idle = [socket.create_connection(("127.0.0.1", 8000)) for _ in range(3)]
time.sleep(0.2)
fourth = socket.create_connection(("127.0.0.1", 8000))
fourth.settimeout(2)
try:
    print("fourth connection read:", fourth.recv(100) or b"(closed by the gateway)")
except (ConnectionResetError, socket.timeout) as exc:
    print("fourth connection:", type(exc).__name__)
time.sleep(3)
for s in idle:
    s.settimeout(1)
    try:
        print("idle connection read after 3 s:", s.recv(100) or b"(closed by the gateway)")
    except (ConnectionResetError, socket.timeout) as exc:
        print("idle connection:", type(exc).__name__)
PY
curl -s localhost:8000/metrics | grep -E '^treespec:http_(connections|header)'
kill -INT $UP; wait $UP; echo "treespec up rc=$?"

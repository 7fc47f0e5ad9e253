"""A mock Kafka cluster for the e2e suite: starts tests/kafkamock (librdkafka's mock
cluster in a process of its own, built next to the ankusa binary under test), reads its
bootstrap servers and drives it with line commands. Stopped by PID. The cluster lives in
that process, so it survives a kill -9 of the node under test."""
import base64
import json
import os
import subprocess
import threading
from pathlib import Path

from helpers import BIN, REPO


def kafkamock_bin():
    here = Path(BIN).resolve().parent / "kafkamock"
    if here.exists():
        return str(here)
    return str(REPO / "build-test" / "kafkamock")


class Record:
    def __init__(self, d):
        self.topic = d["topic"]
        self.partition = d["partition"]
        self.offset = d["offset"]
        self.timestamp = d["timestamp"]
        self.key = None if d["key"] is None else base64.b64decode(d["key"])
        self.value = None if d["value"] is None else base64.b64decode(d["value"])
        self.header_list = [(n, v) for n, v in d["headers"]]
        self.headers = dict(self.header_list)

    def message(self):
        return json.loads(self.value)

    def __repr__(self):
        return f"Record({self.topic}/{self.partition}@{self.offset} key={self.key!r})"


class KafkaMock:
    def __init__(self, topics=("hooks",), brokers=3, stderr_path=None):
        args = [kafkamock_bin(), "-b", str(brokers), *topics]
        self._err = open(stderr_path, "ab") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True, bufsize=1)
        self._lock = threading.Lock()
        self.bootstrap = self.proc.stdout.readline().strip()
        if not self.bootstrap:
            self.close()
            raise RuntimeError("kafkamock did not start")
        self.brokers = self.bootstrap.split(",")

    @property
    def pid(self):
        return self.proc.pid

    def cmd(self, line, timeout=30.0):
        """Send one command; returns the lines it printed before its "ok"."""
        with self._lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            out = []
            while True:
                got = self.proc.stdout.readline()
                if not got:
                    raise RuntimeError(f"kafkamock exited during {line!r}")
                got = got.rstrip("\n")
                if got == "ok":
                    return out
                if got.startswith("error"):
                    raise RuntimeError(f"kafkamock: {line!r}: {got}")
                out.append(got)

    def consume(self, topic):
        return [Record(json.loads(x)) for x in self.cmd(f"consume {topic}")]

    def push_errors(self, n, code):
        self.cmd(f"err {n} {code}")

    def lost_ack(self, topic, rtt_ms):
        self.cmd(f"lostack {topic} {rtt_ms}")

    def down(self, broker=-1):
        self.cmd(f"down {broker}")

    def up(self, broker=-1):
        self.cmd(f"up {broker}")

    def unknown(self, topic, unknown=True):
        """Metadata answers UNKNOWN_TOPIC_OR_PART for topic (or, False: normally again)."""
        self.cmd(f"{'unknown' if unknown else 'known'} {topic}")

    def create(self, topic, partitions=3):
        self.cmd(f"create {topic} {partitions}")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                os.kill(self.proc.pid, 9)
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        if self._err is not subprocess.DEVNULL:
            self._err.close()

"""`tether model serve`: the local model on the URL it prints, answering with no key."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from openai import OpenAI

from tether.local_model import MODEL_NAME
from tether.local_model.server import free_port

STARTS_WITHIN = 60.0


@pytest.mark.usefixtures("installed")
def test_model_serve_prints_a_url_that_answers(tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_CACHE_DIR": str(tmp_path)}  # its log, not the wheel: installed
    port = free_port()
    command = [sys.executable, "-m", "tether.cli", "model", "serve", "--port", str(port)]
    serving = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert serving.stdout is not None
        deadline = time.monotonic() + STARTS_WITHIN
        said = ""
        while "serving" not in said and time.monotonic() < deadline:
            said += serving.stdout.readline()
        url = re.search(r"at (http://\S+/v1)", said)
        assert url is not None, said
        client = OpenAI(base_url=url[1], api_key="none")
        answer = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}], max_tokens=16
        )
        assert answer.choices[0].message.content, answer
    finally:
        serving.send_signal(signal.SIGTERM)
        assert serving.wait(15) == 0
        if serving.stdout is not None:
            serving.stdout.close()

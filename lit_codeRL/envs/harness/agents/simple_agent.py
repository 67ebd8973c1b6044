"""A minimal agent program that speaks only the OpenAI HTTP API (stdlib only; it runs inside the
workspace sandbox): the scripted harness of ``env.name: harness`` and its tests.

    python3 simple_agent.py --task TASK_FILE --base-url URL --api-key KEY [--max-steps 8]

Each step it sends the whole conversation to ``/chat/completions``, runs the first fenced
```` ```bash ```` block of the reply in the working directory (bounded), and appends the reply and
the command's output. A reply holding ``SUBMIT`` ends the run; so does ``--max-steps``. With
``--rewrite-after K`` it restarts its history from the task and the last exchange after K calls,
the way summarising harnesses do (its calls then start new training rows); ``--log-ids`` prints
the exact ids of every reply (what the tests compare the training rows with). Exit status 0, or 3
when the server refused the call (4xx/5xx) or could not be reached.
"""

import argparse
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

SYSTEM = (
    "You are a software engineer fixing a bug in the repository in your working directory. "
    "Reply with one shell command in a ```bash block; you will see its output. "
    "When the fix is done, reply SUBMIT."
)
BLOCK = re.compile(r"```(?:bash|sh)?\n(.*?)```", re.S)


def chat(base_url, api_key, messages, model):
    body = json.dumps({"model": model, "messages": messages}).encode()
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def run(command, timeout):
    try:
        out = subprocess.run(
            ["bash", "-c", command], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return f"(timed out after {timeout} s)"
    text = (out.stdout + out.stderr).decode("utf-8", "replace")
    return f"exit code {out.returncode}\n{text[-2000:]}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--task", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default="policy")
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--command-timeout", type=float, default=20.0)
    p.add_argument("--rewrite-after", type=int, default=0)
    p.add_argument("--log-ids", action="store_true", help="print each reply's prompt and completion ids")
    args = p.parse_args()
    with open(args.task, encoding="utf-8", errors="replace") as f:
        task = f.read()
    start = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    messages = list(start)
    for step in range(args.max_steps):
        if args.rewrite_after and step == args.rewrite_after:
            messages = start + messages[-2:]  # a "summary": the task and the last exchange
        try:
            data = chat(args.base_url, args.api_key, messages, args.model)
            reply = data["choices"][0]["message"]["content"] or ""
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as err:
            print(f"simple_agent: the model call failed: {err}", file=sys.stderr)
            return 3
        if args.log_ids:
            ids = {"prompt": data.get("prompt_token_ids"), "completion": data["choices"][0].get("token_ids")}
            print("ids: " + json.dumps(ids))
        print(f"--- step {step}\n{reply}")
        if "SUBMIT" in reply:
            return 0
        match = BLOCK.search(reply)
        observation = run(match.group(1), args.command_timeout) if match else "No ```bash block found."
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A minimal OpenAI-compatible /v1/chat/completions server over a local HF model folder: greedy,
fp32, CPU, the model's own chat template, one request at a time.

What it is for: running another harness's API mode (EvalScope's ``--eval-type openai_api``)
offline against cube's demo model, where no vLLM is installed; it wrote the EvalScope fixture
(tests/fixtures/evalscope/README.md). Not a server for anything else.

Usage: .venv/bin/python scripts/serve_openai_local.py MODEL_DIR PORT SERVED_NAME
"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL, PORT, NAME = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tok = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
lock = threading.Lock()

class H(BaseHTTPRequestHandler):
    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": NAME, "object": "model"}]})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        msgs = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
                 else "".join(p.get("text", "") for p in m["content"])} for m in req["messages"]]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 64)
        with lock, torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id)
        new = out[0, ids.shape[1]:]
        text = tok.decode(new, skip_special_tokens=True)
        finish = "length" if len(new) >= n else "stop"
        self._send(200, {"id": "cmpl-local", "object": "chat.completion", "created": 0, "model": NAME,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": finish}],
                         "usage": {"prompt_tokens": int(ids.shape[1]), "completion_tokens": int(len(new)),
                                   "total_tokens": int(ids.shape[1] + len(new))}})
    def log_message(self, *a): pass

ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()

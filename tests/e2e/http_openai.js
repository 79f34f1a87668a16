// http_openai.js - run by tests/e2e/71_http_openai.sh (owner: gateway). Drives the
// gateway with the official `openai` npm package (installed by `make e2e` into
// $LLM_BUILD/node) and prints one JSON line per request for the script to compare
// with llmc's output:
//
//   node http_openai.js BASE_URL completion PROMPT N      -> {"stream":..,"text":..,"finish":..,"usage":..}
//   node http_openai.js BASE_URL chat SYSTEM USER N
//   node http_openai.js BASE_URL badkey                   -> the error the client raised
//
// Every request is greedy (temperature 0), once without and once with stream: true
// (stream_options.include_usage), so both paths of the gateway meet the real client.
'use strict';
const path = require('path');
const mod = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

const [baseURL, mode, ...args] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || 'none', maxRetries: 0, timeout: 60000 });

async function completion(prompt, n) {
  const r = await client.completions.create({ model: 'any', prompt, max_tokens: n, temperature: 0 });
  out({ stream: false, text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage, object: r.object });
  const s = await client.completions.create({ model: 'any', prompt, max_tokens: n, temperature: 0, stream: true,
                                              stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) { text += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
  }
  out({ stream: true, text, finish, usage, chunks });
}

async function chat(system, user, n) {
  const messages = [{ role: 'system', content: system }, { role: 'user', content: user }];
  const r = await client.chat.completions.create({ model: 'any', messages, max_tokens: n, temperature: 0,
                                                   logprobs: true, top_logprobs: 2 });
  const lp = r.choices[0].logprobs.content;
  out({ stream: false, text: r.choices[0].message.content, role: r.choices[0].message.role,
        finish: r.choices[0].finish_reason, usage: r.usage, object: r.object, n_logprobs: lp.length,
        top_ok: lp.every((t) => t.top_logprobs.length === 2 && t.logprob <= 0 &&
                                t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob) });
  const s = await client.chat.completions.create({ model: 'any', messages, max_tokens: n, temperature: 0,
                                                   stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, role = null;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  out({ stream: true, text, role, finish, usage });
}

async function badkey() {
  try {
    await client.completions.create({ model: 'any', prompt: 'x', max_tokens: 1 });
    out({ error: null });
  } catch (e) {
    out({ error: e.constructor.name, status: e.status, message: e.message });
  }
}

function out(o) { process.stdout.write(JSON.stringify(o) + '\n'); }

const run = { completion: () => completion(args[0], +args[1]), chat: () => chat(args[0], args[1], +args[2]), badkey }[mode];
run().catch((e) => { console.error(`openai client: ${e.constructor.name}: ${e.message}`); process.exit(1); });

// http_extras.js - run by tests/e2e/79_oai_extras.sh (owner: gateway). The official
// `openai` npm package (in $LLM_BUILD/node) uses what an OpenAI-style server's clients
// expect besides completions: embeddings, n > 1 and chat log-probabilities. Each mode
// checks what it can and prints one JSON line for the script to check the rest:
//
//   node http_extras.js BASE_URL embed   -> {"dim":..,"norms":[..],"same":..,"differ":..,"b64_equal":..}
//   node http_extras.js BASE_URL n       -> {"texts":[..],"stream_texts":[..],"usage":{..}}
//   node http_extras.js BASE_URL logprobs -> {"n":..,"top":..,"stream_n":..,"first":{..}}
'use strict';
const path = require('path');
const mod = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

const [baseURL, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const assert = (c, what) => { if (!c) throw new Error(what); };
const messages = [{ role: 'user', content: 'Tell me a story.' }];

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const equal = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function embed() {
  const input = ['Once upon a time', 'The cat sat on the mat.', 'Once upon a time'];
  // the client asks for base64 itself when no encoding_format is given, and decodes it
  const b = await client.embeddings.create({ model: 'any', input });
  const f = await client.embeddings.create({ model: 'any', input, encoding_format: 'float' });
  assert(f.object === 'list' && f.data.length === 3, 'three embeddings');
  f.data.forEach((d, i) => assert(d.index === i && d.object === 'embedding', 'index ' + i));
  const v = f.data.map((d) => d.embedding), w = b.data.map((d) => Array.from(d.embedding));
  assert(f.usage.prompt_tokens > 3 && f.usage.total_tokens === f.usage.prompt_tokens, 'usage');
  const last = await client.embeddings.create({ model: 'any', input: input[0], encoding_format: 'float', pooling: 'last' });
  let bad = null;
  try {
    await client.embeddings.create({ model: 'any', input: 'x', dimensions: v[0].length + 1 });
  } catch (e) {
    bad = { error: e.constructor.name, status: e.status, message: e.message };
  }
  out({ dim: v[0].length, norms: v.map(norm), same: equal(v[0], v[2]), differ: !equal(v[0], v[1]),
        // JSON's 9 digits round back to the f32 that base64 carries
        b64_equal: v.every((x, i) => equal(x.map(Math.fround), w[i])), last_differs: !equal(last.data[0].embedding, v[0]),
        last_norm: norm(last.data[0].embedding), bad, tokens: f.usage.prompt_tokens });
}

async function n() {
  const req = { model: 'any', messages, max_tokens: 24, temperature: 1.5, seed: 11, n: 3 };
  const r = await client.chat.completions.create(req);
  assert(r.choices.length === 3, 'three choices');
  r.choices.forEach((c, i) => assert(c.index === i, 'choice index ' + i));
  const texts = r.choices.map((c) => c.message.content);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const st = ['', '', ''], fin = [null, null, null];
  let usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      st[c.index] += (c.delta && c.delta.content) || '';
      if (c.finish_reason) fin[c.index] = c.finish_reason;
    }
  }
  assert(fin.every((x) => x), 'every streamed choice finished');
  const comp = await client.completions.create({ model: 'any', prompt: 'Once upon a time', max_tokens: 16, n: 3, seed: 5, temperature: 1.5 });
  assert(comp.choices.length === 3 && comp.choices.every((c, i) => c.index === i), 'completions n=3');
  let bad = null;
  try {
    await client.chat.completions.create({ ...req, n: 9 });
  } catch (e) {
    bad = { error: e.constructor.name, status: e.status, message: e.message };
  }
  out({ texts, stream_texts: st, usage: r.usage, stream_usage: usage, completions: comp.choices.map((c) => c.text), bad });
}

async function logprobs() {
  const req = { model: 'any', messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 };
  const r = await client.chat.completions.create(req);
  const lp = r.choices[0].logprobs.content;
  const text = r.choices[0].message.content;
  assert(lp.length === r.usage.completion_tokens, 'one entry per generated token');
  for (const t of lp) {
    assert(typeof t.token === 'string' && t.logprob <= 0 && Array.isArray(t.bytes), 'entry shape');
    assert(t.top_logprobs.length === 3, 'three alternatives');
    assert(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob, 'alternatives sorted');
    assert(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6, 'greedy: the chosen token is the most probable');
  }
  assert(Buffer.from(lp.flatMap((t) => t.bytes)).toString('utf8') === text, 'bytes spell the text');
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const sl = [];
  for await (const ch of stream) for (const c of ch.choices) if (c.logprobs) sl.push(...c.logprobs.content);
  assert(sl.length === lp.length && sl.every((t, i) => t.token === lp[i].token && t.logprob === lp[i].logprob),
         'streamed log-probs equal the whole answer\'s');
  out({ n: lp.length, top: lp[0].top_logprobs.length, stream_n: sl.length, first: lp[0] });
}

({ embed, n, logprobs })[mode]().catch((e) => { console.error(e); process.exit(1); });

// http_structured.js - run by tests/e2e/77_structured.sh (owner: gateway). The official
// `openai` npm package (in $LLM_BUILD/node) asks the gateway for structured output:
//
//   node http_structured.js BASE_URL schema SCHEMA_JSON SEED  -> {"text":..,"finish":..}
//       chat.completions with response_format json_schema (strict), temperature 1
//   node http_structured.js BASE_URL badschema               -> {"error":..,"status":..,"message":..}
//   node http_structured.js BASE_URL validity SCHEMA_JSON N  -> {"n":..,"valid":..,"bad":[..]}
//       N samples (seeds 1..N, 4 at a time) at temperature 1, each parsed and validated
//       against the schema with ajv and ajv-formats (a real JSON Schema validator, in
//       $LLM_BUILD/node)
'use strict';
const path = require('path');
const mod = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

const [baseURL, mode, ...args] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const messages = [{ role: 'user', content: 'Describe a person.' }];

async function schema(text, seed) {
  const r = await client.chat.completions.create({
    model: 'any', messages, max_tokens: 300, temperature: 1, seed: Number(seed),
    response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: JSON.parse(text) } } });
  out({ text: r.choices[0].message.content, finish: r.choices[0].finish_reason });
}

async function badschema() {
  try {
    await client.chat.completions.create({
      model: 'any', messages, max_tokens: 8,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } } });
    out({ error: null });
  } catch (e) {
    out({ error: e.constructor.name, status: e.status, message: e.message });
  }
}

async function validity(text, n) {
  const Ajv = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'ajv'));
  const formats = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'ajv-formats'));
  const ajv = new (Ajv.default || Ajv)({ strict: true, allErrors: true });
  (formats.default || formats)(ajv);
  const validate = ajv.compile(JSON.parse(text));
  const bad = [];
  let valid = 0, next = 1;
  async function one(seed) {
    const r = await client.chat.completions.create({
      model: 'any', messages, max_tokens: 400, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'doc', strict: true, schema: JSON.parse(text) } } });
    const c = r.choices[0].message.content;
    let doc;
    try { doc = JSON.parse(c); } catch (e) { bad.push({ seed, text: c, why: 'JSON: ' + e.message }); return; }
    if (validate(doc)) valid++;
    else bad.push({ seed, text: c, why: JSON.stringify(validate.errors) });
  }
  async function lane() { while (next <= n) await one(next++); }
  await Promise.all(Array.from({ length: 16 }, lane)); /* a worker's 16 sessions at once */
  out({ n, valid, bad: bad.slice(0, 3) });
}

const modes = { schema: () => schema(args[0], args[1]), badschema, validity: () => validity(args[0], Number(args[1])) };
modes[mode]().catch((e) => { console.error(e); process.exit(1); });

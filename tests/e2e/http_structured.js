// http_structured.js - run by tests/e2e/77_structured.sh (owner: gateway). The official
// `openai` npm package (in $LLM_BUILD/node) asks the gateway for structured output:
//
//   node http_structured.js BASE_URL schema SCHEMA_JSON SEED  -> {"text":..,"finish":..}
//       chat.completions with response_format json_schema (strict), temperature 1
//   node http_structured.js BASE_URL badschema               -> {"error":..,"status":..,"message":..}
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

(mode === 'schema' ? schema(args[0], args[1]) : badschema()).catch((e) => { console.error(e); process.exit(1); });

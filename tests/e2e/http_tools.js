// http_tools.js - run by tests/e2e/78_tools.sh (owner: gateway). The official `openai`
// npm package (in $LLM_BUILD/node) calls tools through the gateway. A random-weight model
// writes noise, so what is asserted is what the gateway guarantees: constrained calls
// (tool_choice required or named) parse and validate against the tool's schema, streamed
// deltas reassemble to the call the whole answer gives, and bad requests are 400s.
//
//   node http_tools.js BASE_URL hermes   -> one line per check, "ok ..." ; exit 1 on a failure
//   node http_tools.js BASE_URL llama3   -> the required-call checks only
'use strict';
const path = require('path');
const mod = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

const [baseURL, family] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const say = (s) => process.stdout.write(s + '\n');
function must(cond, what) { if (!cond) throw new Error(what); }

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: {
      city: { enum: ['Paris', 'Oslo', 'Rome'] }, days: { $ref: '#/$defs/days' }, metric: { type: 'boolean' } },
      required: ['city'], additionalProperties: false,
      $defs: { days: { type: 'integer', minimum: 1, maximum: 7 } } } } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone',
    parameters: { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'] } } },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

// A call's arguments against its tool's schema: ajv (a real JSON Schema validator,
// installed beside the openai client), and the same checks written out by hand.
const Ajv = require(path.join(process.env.LLM_BUILD, 'node', 'node_modules', 'ajv'));
const ajv = new (Ajv.default || Ajv)({ strict: false });
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function validate(call) {
  must(call.type === 'function', 'type is not function');
  must(/^call_[A-Za-z0-9]{24}$/.test(call.id), `bad id ${call.id}`);
  const a = JSON.parse(call.function.arguments);
  const check = schemaOf[call.function.name];
  must(check, `no tool is named ${call.function.name}`);
  must(check(a), `${call.function.name}(${call.function.arguments}): ${ajv.errorsText(check.errors)}`);
  must(a && typeof a === 'object' && !Array.isArray(a), 'arguments are not an object');
  if (call.function.name === 'get_weather') {
    must(['Paris', 'Oslo', 'Rome'].includes(a.city), `city ${a.city}`);
    must(Object.keys(a).every((k) => ['city', 'days', 'metric'].includes(k)), `keys ${Object.keys(a)}`);
    if ('days' in a) must(Number.isInteger(a.days) && a.days >= 1 && a.days <= 7, `days ${a.days}`);
    if ('metric' in a) must(typeof a.metric === 'boolean', `metric ${a.metric}`);
  } else {
    must(call.function.name === 'get_time', `name ${call.function.name}`);
    must(['UTC', 'CET'].includes(a.tz), `tz ${a.tz}`);
  }
  return a;
}

const ask = (extra) => client.chat.completions.create({
  model: 'any', messages, tools, max_tokens: 200, temperature: 1, ...extra });

async function required() {
  for (const seed of [1, 2, 3]) {
    const r = await ask({ tool_choice: 'required', parallel_tool_calls: false, seed });
    const c = r.choices[0];
    must(c.finish_reason === 'tool_calls', `seed ${seed}: finish_reason ${c.finish_reason}`);
    must(c.message.content === null, `seed ${seed}: content ${JSON.stringify(c.message.content)}`);
    must(c.message.tool_calls.length === 1, `seed ${seed}: ${c.message.tool_calls.length} calls`);
    const a = validate(c.message.tool_calls[0]);
    say(`ok required seed ${seed}: ${c.message.tool_calls[0].function.name}(${JSON.stringify(a)})`);
  }
  const r = await ask({ tool_choice: { type: 'function', function: { name: 'get_time' } }, seed: 4 });
  const calls = r.choices[0].message.tool_calls;
  must(calls.length === 1 && calls[0].function.name === 'get_time', `named: ${JSON.stringify(calls)}`);
  say(`ok named get_time: ${JSON.stringify(JSON.parse(calls[0].function.arguments))}`);
}

async function parallel() {
  let most = 0, mostSeed = 5;
  for (const seed of [5, 6, 7, 8]) {
    const r = await ask({ tool_choice: 'required', parallel_tool_calls: true, seed });
    const calls = r.choices[0].message.tool_calls;
    must(calls.length >= 1 && calls.length <= 2, `parallel: ${calls.length} calls`);
    calls.forEach(validate);
    must(new Set(calls.map((c) => c.id)).size === calls.length, 'parallel: ids repeat');
    if (calls.length > most) [most, mostSeed] = [calls.length, seed];
  }
  say(`ok parallel_tool_calls: 1 to 2 calls, each valid (most: ${most})`);
  return mostSeed;
}

// Streamed: each call's first delta has index, id, type and name with arguments "",
// then the arguments; the reassembled calls equal the whole answer's (ids aside).
async function streamed(seed) {
  const args = { tool_choice: 'required', parallel_tool_calls: true, seed };
  const whole = (await ask(args)).choices[0].message.tool_calls;
  const stream = await ask({ ...args, stream: true });
  const calls = [];
  let finish = null, content = '';
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) finish = ch.finish_reason;
    if (ch.delta.content) content += ch.delta.content;
    for (const d of ch.delta.tool_calls || []) {
      if (!calls[d.index]) {
        must(d.id && d.type === 'function' && d.function.name && d.function.arguments === '',
          `first delta ${JSON.stringify(d)}`);
        calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } };
      } else {
        must(!d.id && !(d.function && d.function.name), `later delta ${JSON.stringify(d)}`);
        calls[d.index].function.arguments += d.function.arguments;
      }
    }
  }
  must(finish === 'tool_calls', `stream finish ${finish}`);
  must(content === '', `stream content ${JSON.stringify(content)}`);
  must(calls.length === whole.length, `stream: ${calls.length} calls, whole: ${whole.length}`);
  calls.forEach((c, i) => {
    validate(c);
    must(c.function.name === whole[i].function.name && c.function.arguments === whole[i].function.arguments,
      `stream call ${i} differs: ${JSON.stringify(c)} vs ${JSON.stringify(whole[i])}`);
  });
  say(`ok streamed: ${calls.length} call(s) reassembled equal the whole answer`);
}

async function unconstrained() {
  const r = await ask({ tool_choice: 'auto', max_tokens: 16, seed: 9 });
  const c = r.choices[0];
  must(c.finish_reason !== 'tool_calls' ? typeof c.message.content === 'string' && c.message.content.length > 0
    : c.message.tool_calls.every((x) => typeof JSON.parse(x.function.arguments) === 'object'),
    `auto: ${JSON.stringify(c)}`);
  say(`ok auto: ${c.finish_reason}, content ${JSON.stringify((c.message.content || '').slice(0, 40))}`);
  const n = await ask({ tool_choice: 'none', max_tokens: 8, seed: 9 });
  must(n.choices[0].finish_reason !== 'tool_calls' && typeof n.choices[0].message.content === 'string',
    `none: ${JSON.stringify(n.choices[0])}`);
  say('ok none: content, no calls');
}

async function history() {
  const turn = [
    ...messages,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_abc', content: '{"temp": 21, "sky": "clear"}' },
  ];
  const r = await client.chat.completions.create({ model: 'any', messages: turn, tools, max_tokens: 200,
    temperature: 1, seed: 10, tool_choice: 'required' });
  validate(r.choices[0].message.tool_calls[0]);
  say('ok a turn with a tool result in the history is accepted');
}

async function bad(what, want, extra) {
  try {
    await ask({ max_tokens: 4, ...extra });
  } catch (e) {
    must(e.status === 400 && e.message.includes(want), `${what}: ${e.status} ${e.message}`);
    say(`ok ${what}: 400 ${e.message}`);
    return;
  }
  throw new Error(`${what}: accepted`);
}

async function refusals() {
  await bad('bad tool schema', 'uniqueItems', { tools: [{ type: 'function', function: { name: 'f',
    parameters: { type: 'object', properties: { a: { type: 'array', uniqueItems: true } } } } }] });
  await bad('unknown tool in tool_choice', 'no tool is named', {
    tool_choice: { type: 'function', function: { name: 'nope' } } });
  await bad('bad tool name', 'function.name', { tools: [{ type: 'function', function: { name: 'a b' } }] });
}

async function main() {
  await required();
  if (family === 'llama3') return;
  await streamed(await parallel());
  await unconstrained();
  await history();
  await refusals();
}

main().catch((e) => { console.error(`FAIL ${e.message}`); process.exit(1); });

// Compatibility corpus, Node side: each named check uses a real client the way an agent
// would, and prints one line `RESULT NAME ok DETAIL` or `RESULT NAME fail ERROR`.
//
//   main.mjs --openai URL --anthropic URL --http URL [--undeclared URL] CHECK...
//
// A `deny_*` check tries something the pack does not declare and prints
// `RESULT NAME refused ERROR` when the client saw the refusal as an ordinary error (the
// expected outcome) or `RESULT NAME fail reached` when it got through.
// Exit status: 0 when every check printed ok/refused, 1 otherwise.
import https from 'node:https';
import os from 'node:os';
import v8 from 'node:v8';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const opts = { undeclared: 'https://undeclared.compat.test' };
const checks = [];
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a.startsWith('--')) opts[a.slice(2)] = process.argv[++i];
  else checks.push(a);
}

function expect(cond, detail) {
  if (!cond) throw new Error(`unexpected: ${detail}`);
}

// No retries: a refusal must show at once, as the SDK's own connection error.
const openai = (baseURL = `${opts.openai}/v1`) =>
  new OpenAI({ baseURL, maxRetries: 0, timeout: 10000 });
const anthropic = (baseURL = opts.anthropic) =>
  new Anthropic({ baseURL, maxRetries: 0, timeout: 10000 });
const chat = { model: 'gpt-mock', messages: [{ role: 'user', content: 'hi' }] };
const message = { model: 'claude-mock', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] };

const allowed = {
  async openai_chat() {
    const r = await openai().chat.completions.create(chat);
    const text = r.choices[0].message.content;
    expect(text === 'Hello from mock openai', text);
    return text;
  },
  async openai_stream() {
    const stream = await openai().chat.completions.create({ ...chat, stream: true });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(text === 'Hello from mock openai', text);
    return `${chunks} chunks: ${text}`;
  },
  async anthropic_message() {
    const r = await anthropic().messages.create(message);
    const text = r.content[0].text;
    expect(text === 'Hello from mock anthropic', text);
    return text;
  },
  async anthropic_stream() {
    const stream = anthropic().messages.stream(message);
    let deltas = 0;
    stream.on('text', () => deltas++);
    const text = await stream.finalText();
    expect(text === 'Hello from mock anthropic', text);
    return `${deltas} deltas: ${text}`;
  },
  async anthropic_stream_raw() {
    const stream = await anthropic().messages.create({ ...message, stream: true });
    const types = [];
    for await (const ev of stream) types.push(ev.type);
    expect(types[0] === 'message_start' && types.at(-1) === 'message_stop', types.join(','));
    return types.join(',');
  },
  async fetch_http() {
    const r = await fetch(`${opts.http}/hello/fetch`);
    const text = await r.text();
    expect(r.status === 200 && text.startsWith('hello from plain.compat.test'), text);
    return text;
  },
  async fetch_https() {
    const r = await fetch(`${opts.openai}/hello/fetch`);
    const text = await r.text();
    expect(r.status === 200 && text.startsWith('hello from api.openai.com'), text);
    return text;
  },
  async https_module() {
    const text = await new Promise((resolve, reject) => {
      https.get(`${opts.anthropic}/hello/https`, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { body += d; });
        res.on('end', () => resolve(body));
      }).on('error', reject);
    });
    expect(text.startsWith('hello from api.anthropic.com'), text);
    return text;
  },
  async os_cpus() {
    const cpus = os.cpus().length;
    expect(cpus > 0, `os.cpus() has ${cpus} entries`);
    return `cpus=${cpus} parallelism=${os.availableParallelism()} user=${os.userInfo().username}`;
  },
  async heap_limit() {
    // V8 sizes its heap from the memory Node believes it has: it must fit the Comet's limit
    // (--memory-mib, the manifest's resources.memory), or the agent dies of the limit instead
    // of collecting garbage.
    const limit = v8.getHeapStatistics().heap_size_limit;
    const mib = Number(opts['memory-mib']);
    expect(limit <= mib * 1024 * 1024,
      `heap_size_limit ${limit} > ${mib} MiB (os.totalmem ${os.totalmem()}, constrainedMemory ${process.constrainedMemory?.()})`);
    return `heap_size_limit=${limit} execArgv=${process.execArgv.join(' ')}`;
  },
  async os_interfaces() {
    const ifaces = Object.keys(os.networkInterfaces());
    expect(ifaces.includes('lo'), `interfaces: ${ifaces.join(',')}`);
    return `interfaces=${ifaces.join(',')}`;
  },
};

// Forbidden counterparts: the same SDKs pointed where the pack does not declare.
const denied = {
  async deny_openai_undeclared_host() {
    return openai(`${opts.undeclared}/v1`).chat.completions.create(chat);
  },
  async deny_anthropic_undeclared_port() {
    // A declared name on a port the pack does not declare (the plain server's port).
    const port = new URL(opts.http).port || '80';
    return anthropic(`https://api.anthropic.com:${port}`).messages.create(message);
  },
  async deny_fetch_ip_literal() {
    const port = new URL(opts.http).port || '80';
    return (await fetch(`http://127.0.0.1:${port}/nope`)).text();
  },
};

function describe(e) {
  let cause = e;
  const names = [e?.constructor?.name ?? typeof e];
  while (cause?.cause) {
    cause = cause.cause;
    names.push(cause?.constructor?.name ?? typeof cause);
  }
  return `${names.join('<')} ${cause?.code ?? ''} ${String(cause?.message ?? cause).slice(0, 200)}`.trim();
}

let ok = true;
for (const name of checks) {
  const fn = allowed[name] ?? denied[name];
  if (!fn) {
    console.log(`RESULT ${name} fail no such check`);
    ok = false;
    continue;
  }
  try {
    const detail = await fn();
    if (name in denied) {
      console.log(`RESULT ${name} fail reached`);
      ok = false;
    } else {
      console.log(`RESULT ${name} ok ${detail}`);
    }
  } catch (e) {
    if (name in denied) {
      console.log(`RESULT ${name} refused ${describe(e)}`);
    } else {
      console.error(e);
      console.log(`RESULT ${name} fail ${describe(e)}`);
      ok = false;
    }
  }
}
process.exit(ok ? 0 : 1);

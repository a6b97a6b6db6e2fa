// Compatibility corpus, secrets (issue #12): the SDKs as an agent uses them — default base
// URLs, keys from OPENAI_API_KEY / ANTHROPIC_API_KEY (placeholders here) — and Node's fetch.
// Prints `RESULT NAME ok DETAIL`, `RESULT NAME refused DETAIL` (deny_*: a 403 from the
// gateway, seen as the SDK's own error) or `RESULT NAME fail ERROR`.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const checks = process.argv.slice(2);
const expect = (cond, detail) => { if (!cond) throw new Error(`unexpected: ${detail}`); };
const openai = () => new OpenAI({ maxRetries: 0, timeout: 10000 });
const anthropic = () => new Anthropic({ maxRetries: 0, timeout: 10000 });
const chat = { model: 'gpt-mock', messages: [{ role: 'user', content: 'hi' }] };
const message = { model: 'claude-mock', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] };

const allowed = {
  async env_placeholders() {
    for (const n of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY']) {
      expect(process.env[n].startsWith('soyaos-placeholder-'), `${n}=${process.env[n].slice(0, 24)}`);
    }
    return process.env.NODE_EXTRA_CA_CERTS;
  },
  async openai_chat() {
    const r = await openai().chat.completions.create(chat);
    const text = r.choices[0].message.content;
    expect(text === 'Hello from mock openai', text);
    return text;
  },
  async openai_stream() {
    const stream = await openai().chat.completions.create({ ...chat, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text === 'Hello from mock openai', text);
    return text;
  },
  async anthropic_message() {
    const r = await anthropic().messages.create(message);
    expect(r.content[0].text === 'Hello from mock anthropic', r.content[0].text);
    return r.content[0].text;
  },
  async anthropic_stream() {
    const text = await anthropic().messages.stream(message).finalText();
    expect(text === 'Hello from mock anthropic', text);
    return text;
  },
  // After the SDK calls: wait (SIGUSR2 caught, which the test sees in /proc/PID/status) while
  // the test reads this process's whole memory for the key; the test's SIGUSR2 ends the wait.
  async memscan_wait() {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the test never signalled')), 50000);
      process.once('SIGUSR2', () => { clearTimeout(timer); resolve(); });
    });
    return 'scanned';
  },
  async fetch_get() {
    const r = await fetch('https://api.anthropic.com/hello/fetch');
    const text = await r.text();
    expect(r.status === 200 && text.startsWith('hello from api.anthropic.com'), `${r.status} ${text}`);
    return text;
  },
};

const denied = {
  async deny_openai_models_list() {  // GET /v1/models: no rule allows it
    return openai().models.list();
  },
  async deny_fetch_wrong_method() {
    const r = await fetch('https://api.anthropic.com/v1/messages', { method: 'DELETE' });
    const body = await r.text();
    if (r.status === 403 && r.headers.get('x-soyaos-denied')) {
      throw new Error(`403 x-soyaos-denied: ${r.headers.get('x-soyaos-denied')} ${body.slice(0, 120)}`);
    }
    return `${r.status} ${body}`;
  },
};

let ok = true;
for (const name of checks) {
  const fn = allowed[name] ?? denied[name];
  if (!fn) { console.log(`RESULT ${name} fail no such check`); ok = false; continue; }
  try {
    const detail = await fn();
    if (name in denied) { console.log(`RESULT ${name} fail reached ${String(detail).slice(0, 200)}`); ok = false; }
    else console.log(`RESULT ${name} ok ${detail}`);
  } catch (e) {
    const what = `${e?.constructor?.name} ${e?.status ?? ''} ${String(e?.message ?? e).slice(0, 200)}`;
    if (name in denied && (e?.status === 403 || String(e?.message).startsWith('403 x-soyaos-denied'))) {
      console.log(`RESULT ${name} refused ${what}`);
    } else { console.error(e); console.log(`RESULT ${name} fail ${what}`); ok = false; }
  }
}
process.exit(ok ? 0 : 1);

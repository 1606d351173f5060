// Harness for the end-to-end tests: starts the gemini-proxy emulator and the
// proxy in front of it as child processes on free loopback ports, waits until
// both answer, and stops them again. It builds nothing: the binary comes from
// the environment variable GEMINI_PROXY_BIN.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** How long a child may take to start answering. */
const START_TIMEOUT_MS = 15_000;
/** How long a child may take to exit after SIGTERM before it gets SIGKILL. */
const STOP_TIMEOUT_MS = 5_000;
/** How many bytes of each child's stderr are kept for error messages. */
const LOG_TAIL_BYTES = 16 * 1024;

/** Every child still running, killed synchronously if this process exits. */
const running = new Set();
function killAll() {
  for (const child of running) child.kill('SIGKILL');
}
process.on('exit', killAll);
// A signal would end this process without the 'exit' event; kill the
// children first, then exit the way the signal would have.
for (const [signal, number] of [['SIGINT', 2], ['SIGTERM', 15], ['SIGHUP', 1]]) {
  process.once(signal, () => {
    killAll();
    process.exit(128 + number);
  });
}

/**
 * binary returns the gemini-proxy binary named by GEMINI_PROXY_BIN, or throws
 * an error that says how to set it.
 */
export function binary() {
  const bin = process.env.GEMINI_PROXY_BIN;
  if (!bin) {
    throw new Error(
      'GEMINI_PROXY_BIN is not set: build the binary first, e.g. ' +
        '`go build -o /tmp/gemini-proxy ./cmd/gemini-proxy && ' +
        'GEMINI_PROXY_BIN=/tmp/gemini-proxy npm test`',
    );
  }
  return bin;
}

/**
 * freePort returns a loopback TCP port that was free a moment ago: it listens
 * on port 0 and closes the listener again.
 */
async function freePort() {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address();
  srv.close();
  await once(srv, 'close');
  return port;
}

/**
 * childEnv returns this process's environment without any GEMINI_PROXY_*
 * variable: the proxy rejects unknown ones (GEMINI_PROXY_BIN among them), and
 * the flags below must be the whole configuration.
 */
function childEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('GEMINI_PROXY_')) env[k] = v;
  }
  return env;
}

/** Child is one running gemini-proxy process. */
class Child {
  constructor(name, args) {
    this.name = name;
    this.args = args;
    this.log = '';
    this.exited = false;
    this.proc = spawn(binary(), args, {
      env: childEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    running.add(this.proc);
    const keep = (chunk) => {
      this.log = (this.log + chunk.toString()).slice(-LOG_TAIL_BYTES);
    };
    this.proc.stdout.on('data', keep);
    this.proc.stderr.on('data', keep);
    this.exit = new Promise((resolve) => {
      this.proc.on('error', (err) => {
        this.log += `\nspawn error: ${err.message}`;
        this.exited = true;
        running.delete(this.proc);
        resolve({ code: null, signal: null, error: err });
      });
      this.proc.on('exit', (code, signal) => {
        this.exited = true;
        running.delete(this.proc);
        resolve({ code, signal });
      });
    });
  }

  /**
   * listeners returns the addresses from the child's "listening" log lines,
   * by listener name, e.g. {proxy: '127.0.0.1:41234', admin: '…'}. Both
   * commands log one such line per bound listener (slog text format):
   *   time=… level=INFO msg=listening listener=proxy addr=127.0.0.1:41234
   */
  listeners() {
    const found = {};
    for (const m of this.log.matchAll(/msg=listening listener=(\S+) addr=(\S+)/g)) found[m[1]] = m[2];
    return found;
  }

  /** describe returns the command line and the tail of its output. */
  describe() {
    return `${this.name} (${binary()} ${this.args.join(' ')})\n--- output ---\n${this.log}`;
  }

  /**
   * waitUntil polls check every 50 ms until it returns true, the child exits,
   * or START_TIMEOUT_MS passes.
   */
  async waitUntil(what, check) {
    const deadline = Date.now() + START_TIMEOUT_MS;
    let last = 'no attempt';
    while (Date.now() < deadline) {
      if (this.exited) {
        const { code, signal } = await this.exit;
        throw new Error(`${this.name} exited (code ${code}, signal ${signal}) before ${what}\n${this.describe()}`);
      }
      try {
        if (await check()) return;
        last = 'not yet';
      } catch (err) {
        last = err.message;
      }
      await sleep(50);
    }
    throw new Error(`${this.name}: ${what} not reached within ${START_TIMEOUT_MS} ms (last: ${last})\n${this.describe()}`);
  }

  /** stop sends SIGTERM, waits a bounded time, then sends SIGKILL. */
  async stop() {
    if (this.exited) return;
    this.proc.kill('SIGTERM');
    const cancel = new AbortController();
    const timer = sleep(STOP_TIMEOUT_MS, 'timeout', { signal: cancel.signal }).catch(() => 'exited');
    const first = await Promise.race([this.exit, timer]);
    cancel.abort(); // so that a pending timer does not keep the test process alive
    if (first === 'timeout') {
      this.proc.kill('SIGKILL');
      await this.exit;
    }
  }
}

/** answers200 reports whether GET url answers 200 within a second. */
async function answers200(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
  await res.arrayBuffer();
  return res.status === 200;
}

/**
 * start runs the emulator and the proxy in front of it and returns their
 * URLs and a stop function. stop is safe to call more than once and after a
 * failed start; callers run it in after(). Options: args are extra proxy
 * flags (e.g. ['--config', path]); emulatorArgs extra emulator flags;
 * upstream, if given, maps the emulator's
 * URL to the URL the proxy sends to (e.g. a recording forwarder).
 */
export async function start(opts = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(opts);
    } catch (err) {
      if (attempt === 3 || !/address already in use/.test(err.message)) throw err;
    }
  }
}

async function startOnce({ args = [], emulatorArgs = [], upstream } = {}) {
  const children = [];
  const stop = async () => {
    await Promise.all(children.map((c) => c.stop()));
  };
  try {
    // The emulator and the proxy listener bind port 0: the kernel picks a
    // free port and the child logs it, so parallel test files never race.
    // The admin listener needs a different address string (config rejects
    // admin.listen == server.listen, even for port 0), so it gets a port
    // that was free a moment ago; start retries if someone took it since.
    const emulator = new Child('emulator', ['emulator', '--listen', '127.0.0.1:0', ...emulatorArgs]);
    children.push(emulator);
    let emuAddr;
    await emulator.waitUntil('the emulator logs its listening address', () => {
      emuAddr = Object.values(emulator.listeners())[0];
      return emuAddr !== undefined;
    });
    const emulatorURL = `http://${emuAddr}`;

    const proxy = new Child('proxy', [
      'serve',
      '--listen', '127.0.0.1:0',
      '--admin-listen', `127.0.0.1:${await freePort()}`,
      '--upstream', upstream ? await upstream(emulatorURL) : emulatorURL,
      ...args,
    ]);
    children.push(proxy);
    let addrs;
    await proxy.waitUntil('the proxy logs its proxy and admin addresses', () => {
      addrs = proxy.listeners();
      return addrs.proxy !== undefined && addrs.admin !== undefined;
    });
    const adminURL = `http://${addrs.admin}`;
    await proxy.waitUntil('/readyz answers 200', () => answers200(`${adminURL}/readyz`));

    return {
      emulatorURL,
      proxyURL: `http://${addrs.proxy}`,
      adminURL,
      emulator,
      proxy,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * forwarder starts an HTTP server on loopback that forwards every request to
 * target (streaming the answer back) and appends {method, path, body} of
 * each to log. It returns its URL and a close function.
 */
export async function forwarder(target, log) {
  const srv = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    log.push({ method: req.method, path: req.url, body: body.toString('utf8') });
    try {
      const headers = { ...req.headers };
      delete headers.host;
      delete headers['content-length'];
      const up = await fetch(target + req.url, {
        method: req.method,
        headers,
        body: body.length > 0 ? body : undefined,
      });
      const out = {};
      up.headers.forEach((v, k) => {
        if (k !== 'content-length' && k !== 'content-encoding' && k !== 'transfer-encoding') out[k] = v;
      });
      res.writeHead(up.status, out);
      if (up.body) for await (const c of up.body) res.write(c);
      res.end();
    } catch (err) {
      res.destroy(err);
    }
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    close: async () => {
      srv.closeAllConnections();
      srv.close();
    },
  };
}

/**
 * recording returns a fetch function that calls next and appends
 * "METHOD /path?query" of every request to the origin of prefix to log.
 */
export function recording(next, prefix, log) {
  const origin = new URL(prefix).origin;
  return (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (new URL(url).origin === origin) {
      const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
      const u = new URL(url);
      log.push(`${method} ${u.pathname}${u.search}`);
    }
    return next(input, init);
  };
}

/**
 * metricSamples fetches the Prometheus text exposition at url and returns the
 * samples of the metric named name as [{labels, value}].
 */
export async function metricSamples(url, name) {
  const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}\n${body}`);
  return parseSamples(body, name);
}

/** parseSamples returns the samples of metric name in Prometheus text. */
export function parseSamples(text, name) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    samples.push({ labels, value: Number(m[3]) });
  }
  return samples;
}

/**
 * sum adds the values of the samples whose labels include every pair in
 * match.
 */
export function sum(samples, match) {
  let total = 0;
  for (const s of samples) {
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
  }
  return total;
}

/**
 * startRecorded is start with a recording forwarder between the proxy and
 * the emulator: env.upstream collects {method, path, body} of every request
 * the proxy sent upstream, so a test sees what was actually uploaded.
 */
export async function startRecorded(opts = {}) {
  const upstream = [];
  let fwd;
  const env = await start({
    ...opts,
    upstream: async (emulatorURL) => {
      fwd = await forwarder(emulatorURL, upstream);
      return fwd.url;
    },
  });
  return {
    ...env,
    upstream,
    stop: async () => {
      await env.stop();
      await fwd?.close();
    },
  };
}

/**
 * reporting returns a fetch function that calls next and appends the
 * X-Gemini-Proxy-Report header of every response from the origin of prefix
 * to reports (null when the proxy sent none).
 */
export function reporting(next, prefix, reports) {
  const origin = new URL(prefix).origin;
  return async (input, init) => {
    const res = await next(input, init);
    const url = input instanceof Request ? input.url : String(input);
    if (new URL(url).origin === origin) reports.push(res.headers.get('x-gemini-proxy-report'));
    return res;
  };
}

/**
 * replayText sends one recorded upstream generateContent request straight
 * to the emulator with apiKey and returns the text of its first candidate:
 * the answer the upstream gives to exactly what the proxy sent.
 */
export async function replayText(emulatorURL, req, apiKey) {
  const res = await fetch(emulatorURL + req.path, {
    method: req.method,
    headers: { 'content-type': 'application/json', 'x-goog-api-key': apiKey },
    body: req.body,
    signal: AbortSignal.timeout(10_000),
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`replay ${req.path}: ${res.status} ${JSON.stringify(body)}`);
  return (body.candidates?.[0]?.content?.parts ?? [])
    .filter((p) => typeof p.text === 'string' && !p.thought)
    .map((p) => p.text)
    .join('');
}

/** occurrences counts the non-overlapping occurrences of needle in haystack. */
export function occurrences(haystack, needle) {
  return haystack.split(needle).length - 1;
}

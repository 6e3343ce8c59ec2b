// Copied from the seed system's recording harness (../shared/mastra-http/record.mjs, which made
// golden.json next to this file); no licence file came with it, so it is kept as close to the
// original as possible. Changes for Countersign, all marked "Countersign:":
//   - TARGET_PORT is required (there is no Mastra server here to start);
//   - the client sends API_TOKEN as "Authorization: Bearer <token>" (Countersign's API needs one);
//   - OUT is required (the recording is written there, never over golden.json).
// Records real HTTP traffic between the official @mastra/client-js and the real
// Mastra HTTP server (server.mjs) for the human-in-the-loop routes.
//
//   node record.mjs                    -> results/golden.json, results/meta.json
//   TARGET_PORT=8000 OUT=x.json node record.mjs   -> same scenarios against a server you started
//
// Topology:  MastraClient --HTTP--> logging proxy (this process) --HTTP--> server.mjs (child)
// The proxy forwards bytes unchanged (streaming, no buffering) and keeps a copy of
// every request/response, so what is recorded is exactly what crossed the wire.
process.env.MASTRA_TELEMETRY_DISABLED = '1';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { MastraClient } from '@mastra/client-js';

const here = path.dirname(fileURLToPath(import.meta.url));
const resultsDir = path.join(here, 'results');
const dataDir = path.join(here, 'data');
// Countersign: nothing is written next to this file.
if (!process.env.OUT) { fs.mkdirSync(resultsDir, { recursive: true }); fs.mkdirSync(dataDir, { recursive: true }); }
const STEP_TIMEOUT_MS = Number(process.env.STEP_TIMEOUT_MS ?? 30000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- server ----
function startServer() {
  return new Promise((resolve, reject) => {
    const log = fs.openSync(path.join(dataDir, 'server.log'), 'w');
    const child = spawn(process.execPath, [path.join(here, 'server.mjs'), path.join(dataDir, 'server.db')], {
      stdio: ['ignore', 'pipe', log], env: { ...process.env },
    });
    let buf = '';
    const t = setTimeout(() => reject(new Error('server did not become ready in 60 s')), 60000);
    child.stdout.on('data', (d) => {
      buf += d.toString();
      const line = buf.split('\n').find((l) => l.startsWith('{'));
      if (line) { clearTimeout(t); resolve({ child, info: JSON.parse(line) }); }
    });
    child.on('exit', (code) => { clearTimeout(t); reject(new Error('server exited early with code ' + code)); });
  });
}

// ----------------------------------------------------------------- proxy ----
const exchanges = [];
let seq = 0;

function headersFromRaw(raw) {
  const out = {};
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i].toLowerCase();
    out[k] = k in out ? [].concat(out[k], raw[i + 1]) : raw[i + 1];
  }
  return out;
}

function parseJson(text) {
  if (!text) return undefined;
  try { return JSON.parse(text); } catch { return undefined; }
}

function parseSse(text) {
  // Split exactly like the client does: events are separated by a blank line ("\n\n").
  const parts = text.split('\n\n');
  const trailing = parts.pop();
  return { events: parts, trailingUnterminated: trailing || '' };
}

function startProxy(upstreamPort) {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      const ex = { seq: ++seq, t0: Date.now() };
      const url = new URL(req.url, 'http://proxy');
      const query = {};
      for (const [k, v] of url.searchParams) query[k] = k in query ? [].concat(query[k], v) : v;
      const reqChunks = [];
      req.on('data', (c) => reqChunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(reqChunks);
        const bodyText = body.toString('utf8');
        ex.request = {
          method: req.method,
          path: url.pathname,
          rawQuery: url.search,
          query,
          httpVersion: req.httpVersion,
          headers: headersFromRaw(req.rawHeaders),
          ...(body.length ? { bodyText, body: parseJson(bodyText) } : {}),
        };
        ex.done = new Promise((done) => {
          const up = http.request({ host: '127.0.0.1', port: upstreamPort, method: req.method, path: req.url, headers: req.headers }, (ur) => {
            res.writeHead(ur.statusCode, ur.statusMessage, ur.rawHeaders);
            const respChunks = [];
            ur.on('data', (c) => { respChunks.push(c); res.write(c); });
            ur.on('end', () => {
              res.end();
              const text = Buffer.concat(respChunks).toString('utf8');
              const headers = headersFromRaw(ur.rawHeaders);
              const ct = String(headers['content-type'] ?? '');
              ex.response = {
                status: ur.statusCode,
                statusText: ur.statusMessage,
                headers,
                contentType: ct,
                transportChunks: respChunks.length,
              };
              if (ct.startsWith('text/event-stream')) {
                const { events, trailingUnterminated } = parseSse(text);
                ex.response.sseRaw = text;
                ex.response.sseDataLines = events; // each SSE event verbatim, without the blank-line separator
                if (trailingUnterminated) ex.response.sseTrailingUnterminated = trailingUnterminated;
              } else {
                ex.response.bodyText = text;
                const j = parseJson(text);
                if (j !== undefined) ex.response.body = j;
              }
              ex.durationMs = Date.now() - ex.t0;
              done();
            });
          });
          up.on('error', (e) => { ex.response = { proxyError: String(e) }; res.destroy(e); done(); });
          up.end(body);
        });
        exchanges.push(ex);
      });
    });
    server.keepAliveTimeout = 5000;
    server.listen(0, '127.0.0.1', () => resolve({ server, port: server.address().port }));
  });
}

// ----------------------------------------------------------------- steps ----
const golden = [];
const ctx = {}; // runIds, toolCallIds, timestamps discovered while recording

function errorView(e) {
  return {
    ok: false,
    error: {
      name: e?.name, message: e?.message,
      ...(e?.status !== undefined ? { status: e.status, statusText: e.statusText, body: e.body } : {}),
      isMastraClientError: e?.name === 'MastraClientError',
    },
  };
}

// The client logs some internal problems with console.error instead of throwing;
// capture them per step so they are part of the record.
const origConsoleError = console.error;
let consoleSink = null;
console.error = (...args) => {
  if (consoleSink) consoleSink.push(args.map((a) => (a instanceof Error ? `${a.name}: ${a.message}` : typeof a === 'string' ? a : JSON.stringify(a))).join(' '));
  origConsoleError(...args);
};
const log = (...a) => origConsoleError(...a);

async function step(name, description, fn) {
  const startIdx = exchanges.length;
  let clientView;
  const t0 = Date.now();
  const consoleErrors = [];
  consoleSink = consoleErrors;
  let timer;
  try {
    clientView = await Promise.race([
      fn(),
      new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`step timed out after ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS); }),
    ]);
  } catch (e) {
    clientView = errorView(e);
  } finally {
    clearTimeout(timer);
  }
  const clientMs = Date.now() - t0;
  const mine = exchanges.slice(startIdx);
  await Promise.all(mine.map((x) => x.done));
  await sleep(20);
  consoleSink = null;
  if (consoleErrors.length) clientView = { ...clientView, clientConsoleErrors: consoleErrors };
  const strip = (x) => ({ seq: x.seq, durationMs: x.durationMs, request: x.request, response: x.response });
  const entry = {
    name,
    description,
    request: mine[0] ? strip(mine[0]).request : null,
    response: mine[0] ? strip(mine[0]).response : null,
    clientView,
    exchangeCount: mine.length,
    ...(mine.length > 1 ? { additionalExchanges: mine.slice(1).map(strip) } : {}),
    timing: { clientCallMs: clientMs, firstExchangeMs: mine[0]?.durationMs },
  };
  golden.push(entry);
  const st = entry.response?.status;
  if (entry.response?.sseDataLines && Array.isArray(clientView?.chunks)) {
    // Does the client's processDataStream see exactly JSON.parse(each data line) minus [DONE]?
    const wire = entry.response.sseDataLines.filter((l) => l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
    clientView.chunksEqualWireData = JSON.stringify(wire) === JSON.stringify(clientView.chunks);
  }
  const types = entry.response?.sseDataLines?.map((l) => (l === 'data: [DONE]' ? '[DONE]' : JSON.parse(l.slice(6)).type)).join(',');
  log(`[${String(golden.length).padStart(2)}] ${name}: ${mine.length} exchange(s), status ${st}${types ? ' sse=' + types : ''}${clientView?.ok === false ? ' clientError=' + clientView.error.message?.slice(0, 120) : ''}`);
  return entry;
}

async function streamView(respPromise) {
  const resp = await respPromise;
  const chunks = [];
  await resp.processDataStream({ onChunk: async (c) => { chunks.push(c); } });
  return {
    ok: true,
    status: resp.status,
    statusText: resp.statusText,
    headers: Object.fromEntries(resp.headers.entries()),
    chunkTypes: chunks.map((c) => c.type),
    chunks,
  };
}

async function jsonView(p) {
  return { ok: true, value: await p };
}

function runInfo(entry) {
  const chunks = entry.clientView?.chunks ?? [];
  const runId = chunks.find((c) => typeof c.runId === 'string')?.runId;
  const susp = chunks.find((c) => c.type === 'tool-call-approval' || c.type === 'tool-call-suspended');
  return { runId, toolCallId: susp?.payload?.toolCallId, suspendType: susp?.type };
}

// ------------------------------------------------------------------ main ----
// TARGET_PORT=<port>: record against an already-running server on 127.0.0.1:<port>
// (e.g. a wire-compatible re-implementation) instead of spawning server.mjs.
// Countersign: only against a running server.
if (!process.env.TARGET_PORT || !process.env.OUT || !process.env.API_TOKEN) throw new Error('set TARGET_PORT, OUT and API_TOKEN');
const { child, info } = process.env.TARGET_PORT
  ? { child: null, info: { port: Number(process.env.TARGET_PORT), external: true } }
  : await startServer();
const { server: proxy, port: proxyPort } = await startProxy(info.port);
log(`server on 127.0.0.1:${info.port}, proxy on 127.0.0.1:${proxyPort}`);

// Countersign: the token of the test's reviewer.
const client = new MastraClient({ baseUrl: `http://127.0.0.1:${proxyPort}`, headers: { Authorization: `Bearer ${process.env.API_TOKEN}` } }); // defaults: apiPrefix '/api', retries 3, backoffMs 100
const approver = client.getAgent('approver');
const asker = client.getAgent('asker');
const nomem = client.getAgent('nomem');
const unknownAgent = client.getAgent('no-such-agent');

try {
  // ---- 1. create suspended runs through the client -------------------------
  const start = async (key, agent, agentId, text, memory) => {
    const e = await step(`start_${key}`, `${agentId}.stream(${JSON.stringify(text)}${memory ? `, { memory: ${JSON.stringify(memory)} }` : ''}) -> run suspends`,
      () => streamView(agent.stream(text, memory ? { memory } : {})));
    ctx[key] = runInfo(e);
    await sleep(30); // separate createdAt timestamps
    return e;
  };
  await start('A', approver, 'approver', 'Please delete /tmp/a.txt', { thread: 't1', resource: 'u1' });
  await start('B', approver, 'approver', 'Please delete /tmp/b.txt', { thread: 't2', resource: 'u1' });
  ctx.tMid1 = new Date(); await sleep(30);
  await start('C', approver, 'approver', 'Please delete /tmp/c.txt', { thread: 't3', resource: 'u2' });
  await start('D', approver, 'approver', 'Please delete /tmp/d.txt', null);
  ctx.tMid2 = new Date(); await sleep(30);
  await start('E', asker, 'asker', 'Pick a colour for bike', { thread: 't4', resource: 'u1' });
  await start('F', asker, 'asker', 'Pick a colour for car', { thread: 't5', resource: 'u3' });
  await start('G', nomem, 'nomem', 'Please delete /tmp/g.txt', null);
  await start('H', asker, 'asker', 'Pick a colour for boat', { thread: 't6', resource: 'u1' });

  // ---- 2. listSuspendedRuns --------------------------------------------------
  const list = (name, desc, agent, params, rc) => step(name, desc, () => jsonView(agent.listSuspendedRuns(params, rc)));
  await list('list_all', 'approver.listSuspendedRuns() - no filters (4 runs: A,B,C,D)', approver);
  await list('list_threadId', "threadId 't1' (agent has memory, thread exists)", approver, { threadId: 't1' });
  await list('list_resourceId', "resourceId 'u1'", approver, { resourceId: 'u1' });
  await list('list_threadId_and_resourceId', "threadId 't1' + resourceId 'u1'", approver, { threadId: 't1', resourceId: 'u1' });
  await list('list_threadId_resourceId_mismatch', "threadId 't1' (owned by u1) + resourceId 'u2'", approver, { threadId: 't1', resourceId: 'u2' });
  await list('list_threadId_unknown', "threadId that does not exist in memory storage", approver, { threadId: 'no-such-thread' });
  await list('list_fromDate', 'fromDate = a time between runs B and C (expect C,D)', approver, { fromDate: ctx.tMid1 });
  await list('list_toDate', 'toDate = a time between runs B and C (expect A,B)', approver, { toDate: ctx.tMid1 });
  await list('list_fromDate_toDate', 'fromDate between B/C, toDate between D/E (expect C,D)', approver, { fromDate: ctx.tMid1, toDate: ctx.tMid2 });
  await list('list_fromDate_after_toDate', 'fromDate > toDate', approver, { fromDate: ctx.tMid2, toDate: ctx.tMid1 });
  await list('list_perPage2_page0', 'perPage 2, page 0', approver, { perPage: 2, page: 0 });
  await list('list_perPage2_page1', 'perPage 2, page 1', approver, { perPage: 2, page: 1 });
  await list('list_perPage2_page5_past_end', 'perPage 2, page 5 (past the end)', approver, { perPage: 2, page: 5 });
  await list('list_perPage_only', 'perPage 2 without page', approver, { perPage: 2 });
  await list('list_page_only', 'page 1 without perPage', approver, { page: 1 });
  await list('list_perPage_0', 'perPage 0 (invalid)', approver, { perPage: 0 });
  await list('list_perPage_negative', 'perPage -1 (invalid)', approver, { perPage: -1 });
  await list('list_perPage_fraction', 'perPage 1.5 (invalid)', approver, { perPage: 1.5 });
  await list('list_perPage_non_numeric', "perPage 'abc' (invalid; bypasses the client's TS type)", approver, { perPage: 'abc' });
  await list('list_page_negative', 'page -1 (invalid)', approver, { perPage: 2, page: -1 });
  await list('list_with_requestContext', "resourceId 'u1' + requestContext {tenant:'acme'} (client encodes it as base64 JSON query param)", approver, { resourceId: 'u1' }, { tenant: 'acme' });
  await list('list_asker_all', 'asker.listSuspendedRuns() - suspend() runs E,F,H (suspendPayload, no args)', asker);
  await list('list_asker_resourceId', "asker, resourceId 'u3'", asker, { resourceId: 'u3' });
  await list('list_nomem_all', 'nomem (agent without memory) - no filters', nomem);
  await list('list_nomem_threadId', 'nomem (agent without memory) with a threadId filter', nomem, { threadId: 't1' });
  await list('list_unknown_agent', 'unknown agent id', unknownAgent);

  // ---- 3. approve / decline / resume ----------------------------------------
  const A = ctx.A, B = ctx.B, C = ctx.C, D = ctx.D, E = ctx.E, F = ctx.F, G = ctx.G, H = ctx.H;
  const UNKNOWN_RUN = '00000000-0000-4000-8000-000000000000';
  await step('approve_ok', 'approver.approveToolCall({runId: A, toolCallId}) -> tool runs, model answers, stream finishes',
    () => streamView(approver.approveToolCall({ runId: A.runId, toolCallId: A.toolCallId })));
  await step('approve_again_after_completion', 'approveToolCall on run A again (already completed)',
    () => streamView(approver.approveToolCall({ runId: A.runId, toolCallId: A.toolCallId })));
  await step('decline_with_reason', "declineToolCall({runId: B, toolCallId, reason: 'User said no: keep the file'})",
    () => streamView(approver.declineToolCall({ runId: B.runId, toolCallId: B.toolCallId, reason: 'User said no: keep the file' })));
  await step('approve_wrong_toolCallId', "approveToolCall({runId: C, toolCallId: 'wrong-call-id'})",
    () => streamView(approver.approveToolCall({ runId: C.runId, toolCallId: 'wrong-call-id' })));
  await step('approve_missing_toolCallId', 'approveToolCall({runId: C}) without toolCallId',
    () => streamView(approver.approveToolCall({ runId: C.runId })));
  await list('list_after_wrong_toolCallId', 'run C is still listed after the failed approvals', approver, { resourceId: 'u2' });
  await step('decline_without_reason', 'declineToolCall({runId: C, toolCallId}) without reason',
    () => streamView(approver.declineToolCall({ runId: C.runId, toolCallId: C.toolCallId })));
  await step('approve_unknown_runId', `approveToolCall({runId: '${UNKNOWN_RUN}', toolCallId: 'x'})`,
    () => streamView(approver.approveToolCall({ runId: UNKNOWN_RUN, toolCallId: 'x' })));
  await step('decline_unknown_runId', `declineToolCall({runId: '${UNKNOWN_RUN}', toolCallId: 'x', reason: 'nope'})`,
    () => streamView(approver.declineToolCall({ runId: UNKNOWN_RUN, toolCallId: 'x', reason: 'nope' })));
  await step('approve_unknown_agent', 'approveToolCall on an unknown agent id',
    () => streamView(unknownAgent.approveToolCall({ runId: D.runId, toolCallId: D.toolCallId })));
  await step('resume_unknown_runId', `asker.resumeStream({color:'red'}, {runId: '${UNKNOWN_RUN}'})`,
    () => streamView(asker.resumeStream({ color: 'red' }, { runId: UNKNOWN_RUN })));
  await step('resume_missing_resumeData', 'asker.resumeStream(undefined, {runId: E}) - resumeData omitted from body',
    () => streamView(asker.resumeStream(undefined, { runId: E.runId })));
  await step('resume_ok_with_memory_and_toolCallId', "asker.resumeStream({color:'blue'}, {runId: E, toolCallId, memory:{thread:'t4', resource:'u1'}})",
    () => streamView(asker.resumeStream({ color: 'blue' }, { runId: E.runId, toolCallId: E.toolCallId, memory: { thread: 't4', resource: 'u1' } })));
  await step('resume_ok_runId_only', "asker.resumeStream({color:'green'}, {runId: F})",
    () => streamView(asker.resumeStream({ color: 'green' }, { runId: F.runId })));
  await step('resume_invalid_resumeData', "asker.resumeStream({colour: 1}, {runId: H}) - resumeData fails the tool's resumeSchema",
    () => streamView(asker.resumeStream({ colour: 1 }, { runId: H.runId })));
  await step('approve_ok_no_memory_run', 'approveToolCall on run D (started without memory)',
    () => streamView(approver.approveToolCall({ runId: D.runId, toolCallId: D.toolCallId })));
  await step('resume_approval_run_with_approved_true', "nomem.resumeStream({approved:true}, {runId: G, toolCallId}) - approving through resume-stream",
    () => streamView(nomem.resumeStream({ approved: true }, { runId: G.runId, toolCallId: G.toolCallId })));

  // ---- 4. final state --------------------------------------------------------
  await list('list_all_after', 'approver.listSuspendedRuns() after all approvals/declines (expect empty)', approver);
  await list('list_asker_after', 'asker.listSuspendedRuns() after both resumes (expect empty)', asker);
} finally {
  const meta = {
    recordedAt: new Date().toISOString(),
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    packages: Object.fromEntries(['@mastra/core', '@mastra/server', '@mastra/hono', '@mastra/client-js', '@mastra/libsql', '@mastra/memory', 'hono', '@hono/node-server', 'zod'].map((p) => {
      try { return [p, JSON.parse(fs.readFileSync(path.join(here, 'node_modules', p, 'package.json'), 'utf8')).version]; } catch { return [p, null]; }
    })),
    topology: 'MastraClient(baseUrl=proxy) -> node http logging proxy -> @hono/node-server + @mastra/hono MastraServer (prefix /api)',
    serverPort: info.port,
    externalServer: Boolean(info.external),
    proxyPort,
    ids: ctx,
    entryNames: golden.map((e) => e.name),
  };
  const outFile = path.resolve(process.env.OUT ?? path.join(resultsDir, 'golden.json'));
  const metaFile = outFile.replace(/\.json$/, '') + '.meta.json';
  fs.writeFileSync(outFile, JSON.stringify(golden, null, 2) + '\n');
  fs.writeFileSync(process.env.OUT ? metaFile : path.join(resultsDir, 'meta.json'), JSON.stringify(meta, null, 2) + '\n');
  log(`wrote ${path.relative(process.cwd(), outFile)} (${golden.length} entries, ${exchanges.length} HTTP exchanges) + meta`);
  proxy.close();
  proxy.closeAllConnections?.();
  child?.kill('SIGTERM');
}

// The official AG-UI client (@ag-ui/client's HttpAgent) chatting with Countersign's `concierge`
// (tests/support/ag_ui_agents.py) over POST /api/ag-ui/agents/concierge, driven by
// tests/api/test_ag_ui_client.py. TARGET_PORT: the server; API_TOKEN: the chat's user (rita);
// REVIEWER_TOKEN: a second reviewer (victor), who decides at the desk over the v1 API.
// Prints one JSON line: what each scenario saw.
import { HttpAgent, buildResumeArray } from '@ag-ui/client';
import { randomUUID } from 'node:crypto';

const base = `http://127.0.0.1:${process.env.TARGET_PORT}`;
const url = `${base}/api/ag-ui/agents/concierge`;

function chat(threadId, token = process.env.API_TOKEN) {
  return new HttpAgent({ url, threadId, headers: { Authorization: `Bearer ${token}` } });
}

// One runAgent call, with what the subscriber saw of it.
async function run(agent, parameters = {}, onCustom = undefined) {
  const seen = { events: [], custom: [], outcome: null, result: null, interrupts: [], error: null };
  const subscriber = {
    onEvent: ({ event }) => { seen.events.push(event.type); },
    onCustomEvent: async ({ event }) => {
      seen.custom.push({ name: event.name, value: event.value });
      if (onCustom) await onCustom(event);
    },
    onRunFinishedEvent: (params) => {
      seen.outcome = params.outcome;
      seen.result = params.result ?? null;
      if (params.outcome === 'interrupt') seen.interrupts = params.interrupts;
    },
    onRunErrorEvent: ({ event }) => { seen.error = { message: event.message, code: event.code }; },
  };
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (error) {
    seen.error = seen.error ?? { message: String(error) };
  }
  return seen;
}

function say(agent, text) {
  agent.addMessage({ id: randomUUID(), role: 'user', content: text });
}

function toolResults(agent) {
  return agent.messages.filter((m) => m.role === 'tool').map((m) => JSON.parse(m.content));
}

async function approveAtTheDesk(interrupt) {
  const { runId } = interrupt.metadata.countersign;
  const path = `/api/v1/agents/concierge/runs/${encodeURIComponent(runId)}/calls/${encodeURIComponent(interrupt.toolCallId)}/approve`;
  const answer = await fetch(base + path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${process.env.REVIEWER_TOKEN}`, 'Content-Type': 'application/json' },
    body: '{}',
  });
  return answer.status;
}

const out = {};

// 1. A run that completes: text, RUN_FINISHED success.
{
  const agent = chat(`node-hello-${randomUUID()}`);
  say(agent, 'hello from node');
  const seen = await run(agent);
  const reply = agent.messages.at(-1);
  out.completes = { outcome: seen.outcome, role: reply.role, text: reply.content, events: seen.events };
}

// 2. An approval interrupt, answered by the chat's user: the tool runs once with the edits.
{
  const agent = chat(`node-refund-${randomUUID()}`);
  say(agent, 'refund #N1 900');
  const parked = await run(agent);
  const [interrupt] = agent.pendingInterrupts;
  const toolCall = agent.messages.find((m) => m.role === 'assistant' && m.toolCalls?.length)?.toolCalls[0];
  const resume = buildResumeArray(agent.pendingInterrupts, {
    [interrupt.id]: { status: 'resolved', payload: { approved: true, editedArgs: { order_id: 'N1', amount_cents: 800 } } },
  });
  const done = await run(agent, { resume });
  out.approval = {
    parked: parked.outcome,
    interrupt,
    toolCall: toolCall && { name: toolCall.function.name, args: JSON.parse(toolCall.function.arguments) },
    outcome: done.outcome,
    results: toolResults(agent),
    pendingAfter: agent.pendingInterrupts.length,
  };
}

// 3. A suspend() interrupt: the answer follows the tool's resume schema.
{
  const agent = chat(`node-paint-${randomUUID()}`);
  say(agent, 'paint the fence');
  await run(agent);
  const [interrupt] = agent.pendingInterrupts;
  const resume = buildResumeArray(agent.pendingInterrupts, { [interrupt.id]: { status: 'resolved', payload: { colour: 'blue' } } });
  const done = await run(agent, { resume });
  out.suspend = { interrupt, outcome: done.outcome, results: toolResults(agent) };
}

// 4. Separation of duties: the chat's user may not approve; the stream waits, a reviewer approves
//    at the desk, and the same stream carries the continuation.
{
  const agent = chat(`node-wire-${randomUUID()}`);
  say(agent, 'wire 3000');
  await run(agent);
  const [interrupt] = agent.pendingInterrupts;
  const resume = buildResumeArray(agent.pendingInterrupts, { [interrupt.id]: { status: 'resolved', payload: { approved: true } } });
  let deskStatus = null;
  const done = await run(agent, { resume }, async (event) => {
    if (event.name === 'countersign.decision_refused') deskStatus = await approveAtTheDesk(interrupt);
  });
  out.handed = { interrupt, custom: done.custom, deskStatus, outcome: done.outcome, results: toolResults(agent) };
}

// 5. Two chats answer the same interrupt at once: one decision.
{
  const threadId = `node-race-${randomUUID()}`;
  const first = chat(threadId);
  say(first, 'refund #R9 100');
  await run(first);
  const second = chat(threadId);
  second.pendingInterrupts = structuredClone(first.pendingInterrupts);
  const [interrupt] = first.pendingInterrupts;
  const resume = buildResumeArray(first.pendingInterrupts, { [interrupt.id]: { status: 'resolved', payload: { approved: true } } });
  const both = await Promise.all([run(first, { resume }), run(second, { resume })]);
  out.race = both.map((seen) => ({ outcome: seen.outcome, custom: seen.custom, error: seen.error }));
}

console.log(JSON.stringify(out));

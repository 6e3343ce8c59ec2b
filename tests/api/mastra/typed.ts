// Typed application code against Countersign with the official @mastra/client-js, as a TypeScript
// app would write it: TypeScript checks it against the client's own types (strict), then it runs.
// tests/api/test_mastra_client.py compiles and runs it (TARGET_PORT, API_TOKEN) and reads the JSON
// it prints last. Every call of the client it makes, and every finish field it reads, must work:
// a field Mastra's types declare that the server leaves out throws here.
import { MastraClient } from '@mastra/client-js';

// (Node's own types are not installed: the two things used of it, declared.)
declare const process: { env: Record<string, string | undefined> };

function check(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

const client = new MastraClient({
  baseUrl: `http://127.0.0.1:${process.env.TARGET_PORT}`,
  headers: { Authorization: `Bearer ${process.env.API_TOKEN}` },
  retries: 0,
});

type Agent = ReturnType<MastraClient['getAgent']>;
type Streamed = Awaited<ReturnType<Agent['approveToolCall']>>;
type Chunk = Parameters<Parameters<Streamed['processDataStream']>[0]['onChunk']>[0];

/** What typed code reads of a stream's last step and finish. */
interface Finish {
  runId: string;
  stepTokens: number;
  totalTokens: number;
  inputTokens: number;
  outputTokens: number;
  modelId: unknown;
  messages: number;
  nonUser: number;
  uiMessages: number | null;
  text: string;
}

async function chunksOf(response: Streamed): Promise<Chunk[]> {
  const chunks: Chunk[] = [];
  await response.processDataStream({
    onChunk: async (chunk) => {
      chunks.push(chunk);
    },
  });
  return chunks;
}

function finishOf(chunks: Chunk[]): Finish {
  let step: number | undefined;
  let text = '';
  for (const chunk of chunks) {
    if (chunk.type === 'step-finish') {
      step = chunk.payload.output.usage.totalTokens;
      text = chunk.payload.output.text ?? '';
    }
    if (chunk.type === 'finish') {
      const { payload } = chunk;
      const usage = payload.output.usage;
      check(step !== undefined, 'a step-finish comes before the finish');
      return {
        runId: chunk.runId,
        stepTokens: step,
        totalTokens: usage.totalTokens ?? -1,
        inputTokens: usage.inputTokens ?? -1,
        outputTokens: usage.outputTokens ?? -1,
        modelId: payload.metadata.modelId,
        messages: payload.messages.all.length,
        nonUser: payload.messages.nonUser.length,
        uiMessages: payload.response?.uiMessages?.length ?? null,
        text,
      };
    }
  }
  throw new Error(`no finish among ${chunks.map((c) => c.type).join(', ')}`);
}

function waitingCall(chunks: Chunk[]): { runId: string; toolCallId: string } {
  for (const chunk of chunks) {
    if (chunk.type === 'tool-call-approval' || chunk.type === 'tool-call-suspended') {
      return { runId: chunk.runId, toolCallId: chunk.payload.toolCallId };
    }
  }
  throw new Error('the run did not park');
}

async function status(call: () => Promise<unknown>): Promise<number> {
  try {
    await call();
  } catch (error) {
    return (error as { status?: number }).status ?? -1;
  }
  return 200;
}

const approver = client.getAgent('approver');
const asker = client.getAgent('asker');
const nomem = client.getAgent('nomem');

// client.listAgents() and agent.details()
const agents = await client.listAgents();
const details = await approver.details();
const deleteFile = details.tools['deleteFile'];
check(deleteFile !== undefined, 'details lists the agent tools');

// stream with a runId of the caller's choosing, then approveToolCall: the finish fields
const memory = { thread: 'typed-t1', resource: 'typed-u1' };
const parked = waitingCall(await chunksOf(await approver.stream('Please delete /tmp/typed-a.txt', { runId: 'typed-run-1', memory })));
const approved = finishOf(await chunksOf(await approver.approveToolCall(parked)));
// the same runId again is refused; an invalid one too
const clash = await status(() => approver.stream('Please delete /tmp/typed-b.txt', { runId: 'typed-run-1' }));
const invalid = await status(() => approver.stream('Please delete /tmp/typed-b.txt', { runId: 'no/slashes' }));

// declineToolCall and resumeStream: their finish fields
const toDecline = waitingCall(await chunksOf(await nomem.stream('Please delete /tmp/typed-c.txt')));
const declined = finishOf(await chunksOf(await nomem.declineToolCall({ ...toDecline, reason: 'Keep it' })));
const asked = waitingCall(await chunksOf(await asker.stream('Pick a colour for kite', { memory })));
const resumed = finishOf(await chunksOf(await asker.resumeStream({ color: 'red' }, { runId: asked.runId })));

// generate (suspended), then approveToolCallGenerate / declineToolCallGenerate
const generated = await approver.generate('Please delete /tmp/typed-d.txt', { memory, runId: 'typed-run-2' });
check(generated.finishReason === 'suspended', `generate parks: ${generated.finishReason}`);
const waiting = generated.suspendPayload as { toolCallId: string; toolName: string };
const afterApproval = await approver.approveToolCallGenerate({ runId: generated.runId ?? '', toolCallId: waiting.toolCallId });
const second = await nomem.generate('Please delete /tmp/typed-e.txt');
const afterDecline = await nomem.declineToolCallGenerate({
  runId: second.runId ?? '',
  toolCallId: (second.suspendPayload as { toolCallId: string }).toolCallId,
  reason: 'Not today',
});

console.log(
  JSON.stringify({
    agents: Object.keys(agents).sort(),
    details: { id: details.id, name: details.name, modelId: details.modelId, requireApproval: deleteFile.requireApproval },
    parked,
    approved,
    clash,
    invalid,
    declined,
    resumed,
    generated: {
      finishReason: generated.finishReason,
      runId: generated.runId,
      toolName: waiting.toolName,
      totalTokens: generated.usage.totalTokens,
    },
    afterApproval: {
      finishReason: afterApproval.finishReason,
      text: afterApproval.text,
      totalTokens: afterApproval.usage.totalTokens,
      allTokens: afterApproval.totalUsage.totalTokens,
      modelId: afterApproval.response.modelId,
    },
    afterDecline: { finishReason: afterDecline.finishReason, text: afterDecline.text },
  }),
);

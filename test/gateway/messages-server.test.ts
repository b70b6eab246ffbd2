import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAnthropicSummarizer } from '../../src/gateway/anthropic-summarizer.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { behaviours } from '../support/messages-server.ts';

const SERVER_SCRIPT = fileURLToPath(new URL('../support/messages-server.ts', import.meta.url));

describe('the messages server in its own process', () => {
  let child: ChildProcess;
  let url: string;

  beforeAll(async () => {
    // `node --import tsx`, not `npx tsx`: the pid we signal is then the server itself.
    child = spawn(process.execPath, ['--import', 'tsx', SERVER_SCRIPT], { stdio: ['ignore', 'pipe', 'inherit'] });
    const [line] = (await once(createInterface({ input: child.stdout! }), 'line')) as [string];
    url = (JSON.parse(line) as { url: string }).url;
  });

  afterAll(async () => {
    if (child.exitCode === null) {
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }
  });

  it('is scripted and read over HTTP by another process', async () => {
    const queued = await fetch(`${url}/_control/queue`, {
      method: 'POST',
      body: JSON.stringify([behaviours.overloaded(), behaviours.refusal()]),
    });
    expect(await queued.json()).toEqual({ queued: 2 });

    const summarizer = createAnthropicSummarizer({ apiKey: 'test-key', baseURL: url, model: 'm', maxChars: 6000, timeoutMs: 5_000 });
    const request = { promptVersion: CONVERSATION_PROMPT_VERSION, items: [{ id: 'msg_1', text: 'Hello.' }] };
    expect(await summarizer.summarize(request)).toMatchObject({ kind: 'deferred', reason: 'http_529:overloaded_error: Overloaded' });
    expect(await summarizer.summarize(request)).toMatchObject({ kind: 'invalid', reason: 'stop_reason:refusal' });
    expect(await summarizer.summarize(request)).toMatchObject({ kind: 'ok' });

    const stats = (await (await fetch(`${url}/_control/stats`)).json()) as {
      count: number;
      maxInFlight: number;
      requests: { behaviour: string }[];
    };
    expect(stats.count).toBe(3);
    expect(stats.requests.map((r) => r.behaviour)).toEqual(['error', 'message', 'echo']);
  });
});

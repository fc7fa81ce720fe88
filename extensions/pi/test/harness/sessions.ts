// Building session entries with Pi's own SessionManager, as an agent run would append them.

import type { SessionEntry } from "@earendil-works/pi-coding-agent";
import { SessionManager } from "./pilib.ts";

type SM = ReturnType<typeof SessionManager.inMemory>;

let clock = Date.parse("2026-01-05T09:00:00.000Z");
const tick = () => (clock += 1500);

const zeroCost = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 };

/** newSession starts a session the way Pi's SDK does: model_change, then thinking_level_change. */
export function newSession(): SM {
	const sm = SessionManager.inMemory("/home/dev/project");
	sm.appendModelChange("fake", "fake-model");
	sm.appendThinkingLevelChange("off");
	return sm;
}

export function user(sm: SM, text: string): string {
	return sm.appendMessage({ role: "user", content: [{ type: "text", text }], timestamp: tick() });
}

export interface Call {
	id: string;
	name: string;
	arguments: Record<string, unknown>;
}

let callN = 0;

export function assistant(sm: SM, text: string, calls: Array<{ name: string; args: Record<string, unknown> }> = [], contextTokens = 1000): { id: string; calls: Call[] } {
	const toolCalls = calls.map((c) => ({ type: "toolCall" as const, id: `call_${++callN}`, name: c.name, arguments: c.args }));
	const content = [...(text ? [{ type: "text" as const, text }] : []), ...toolCalls];
	const output = Math.ceil(text.length / 4) + 10;
	const id = sm.appendMessage({
		role: "assistant",
		content: content as Parameters<SM["appendMessage"]>[0] extends { content: infer C } ? C : never,
		api: "openai-completions",
		provider: "fake",
		model: "fake-model",
		usage: { input: contextTokens, output, cacheRead: 0, cacheWrite: 0, totalTokens: contextTokens + output, cost: zeroCost },
		stopReason: toolCalls.length ? "toolUse" : "stop",
		timestamp: tick(),
	});
	return { id, calls: toolCalls };
}

export function toolResult(sm: SM, call: Call, text: string): string {
	return sm.appendMessage({
		role: "toolResult",
		toolCallId: call.id,
		toolName: call.name,
		content: [{ type: "text", text }],
		isError: false,
		timestamp: tick(),
	});
}

const filler = (n: number, word: string) => `${word} `.repeat(Math.ceil(n / (word.length + 1))).slice(0, n);

/**
 * turn appends one agent run: the prompt, an assistant that reads and edits files, their
 * results, and a final answer. Returns the ids in order.
 */
export function turn(sm: SM, i: number, size = 2000): string[] {
	const ids: string[] = [];
	ids.push(user(sm, `Task ${i}: ${filler(200, "please")}`));
	const a = assistant(sm, `Looking at module ${i}.`, [
		{ name: "read", args: { path: `src/mod${i}.ts` } },
		{ name: "edit", args: { path: `src/mod${i % 3}.ts`, edits: [{ oldText: "a", newText: "b" }] } },
	]);
	ids.push(a.id);
	ids.push(toolResult(sm, a.calls[0], filler(size, `content${i}`)));
	ids.push(toolResult(sm, a.calls[1], `Edited src/mod${i % 3}.ts`));
	ids.push(assistant(sm, `Done with task ${i}. ${filler(size / 2, "explained")}`).id);
	return ids;
}

export function branchOf(sm: SM): SessionEntry[] {
	return sm.getBranch();
}

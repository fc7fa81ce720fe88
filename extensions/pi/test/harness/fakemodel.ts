// An OpenAI-compatible chat-completions server over real HTTP on a random loopback port,
// scripted for the tests. Pi talks to it through a models.json custom provider
// (api "openai-completions").
//
// - A summary request (Pi's own compaction and its turn-prefix summary: a request that offers
//   no tools, in every Pi) is answered with a numbered summary, after summaryDelayMs, and counted.
// - Any other request is an agent turn: after a user prompt the model calls the `read` tool
//   on the next file of `files`; after a tool result it answers with a long text.
// - Usage: prompt_tokens is chars/4 of the request's messages, or `promptTokens` when a test
//   sets it to push Pi's context usage to a given level.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

export interface RecordedRequest {
	at: number;
	kind: "summary" | "turn";
	body: ChatBody;
}

interface ChatMessage {
	role: string;
	content?: string | Array<{ type: string; text?: string }> | null;
	tool_calls?: unknown[];
}
interface ChatBody {
	model: string;
	messages: ChatMessage[];
	stream?: boolean;
	tools?: unknown[];
}

export class FakeModel {
	readonly requests: RecordedRequest[] = [];
	summaryDelayMs = 0;
	/** When set, every agent turn reports exactly this many prompt tokens (drives Pi's context usage). */
	promptTokens: number | undefined;
	/** When set, promptTokens applies to this many more agent turns only, then is cleared. */
	promptTokensTurns: number | undefined;
	answerChars = 1600;
	files: string[] = [];
	#fileIdx = 0;
	#server: Server | undefined;
	#summaries = 0;
	baseUrl = "";

	get summaryRequests(): number {
		return this.requests.filter((r) => r.kind === "summary").length;
	}

	async start(): Promise<void> {
		this.#server = createServer((req, res) => {
			this.#handle(req, res).catch((err) => {
				res.statusCode = 500;
				res.end(String(err));
			});
		});
		await new Promise<void>((ok) => this.#server?.listen(0, "127.0.0.1", ok));
		const port = (this.#server.address() as { port: number }).port;
		this.baseUrl = `http://127.0.0.1:${port}/v1`;
	}

	async stop(): Promise<void> {
		this.#server?.closeAllConnections();
		await new Promise<void>((ok) => (this.#server ? this.#server.close(() => ok()) : ok()));
	}

	async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
		const chunks: Buffer[] = [];
		for await (const c of req) chunks.push(c as Buffer);
		if (!req.url?.endsWith("/chat/completions")) {
			res.statusCode = 404;
			res.end("not found");
			return;
		}
		const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as ChatBody;
		const kind = isSummaryRequest(body) ? "summary" : "turn";
		this.requests.push({ at: performance.now(), kind, body });
		const estimate = Math.ceil(JSON.stringify(body.messages).length / 4);
		const promptTokens = kind === "turn" && this.promptTokens !== undefined ? this.promptTokens : estimate;
		if (kind === "turn" && this.promptTokensTurns !== undefined && --this.promptTokensTurns <= 0) {
			this.promptTokens = undefined;
			this.promptTokensTurns = undefined;
		}
		if (kind === "summary") {
			if (this.summaryDelayMs > 0) await new Promise((r) => setTimeout(r, this.summaryDelayMs));
			this.#summaries++;
			return stream(res, body.model, { text: `## Goal\nPi's own summary #${this.#summaries}.` }, promptTokens);
		}
		const last = body.messages[body.messages.length - 1];
		if (last?.role === "user" && this.files.length > 0) {
			const path = this.files[this.#fileIdx++ % this.files.length];
			return stream(res, body.model, { toolCall: { name: "read", args: { path } } }, promptTokens);
		}
		const n = body.messages.length;
		const text = `Answer after ${n} messages. ${"The handler validates the payload before it is flushed. ".repeat(Math.ceil(this.answerChars / 56))}`.slice(0, this.answerChars);
		return stream(res, body.model, { text }, promptTokens);
	}
}

/**
 * Pi's summarizer offers the model no tools; an agent turn always does (Pi's built-in tools).
 * (The prompts differ between Pi releases: 1.6's turn-prefix request no longer opens with
 * <conversation>, so the text is no test.)
 */
function isSummaryRequest(body: ChatBody): boolean {
	return !Array.isArray(body.tools) || body.tools.length === 0;
}

let callSeq = 0;

function stream(
	res: ServerResponse,
	model: string,
	out: { text?: string; toolCall?: { name: string; args: unknown } },
	promptTokens: number,
): void {
	res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
	const id = `chatcmpl-${++callSeq}`;
	const send = (obj: unknown) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
	const chunk = (delta: unknown, finish: string | null) => send({ id, object: "chat.completion.chunk", created: 0, model, choices: [{ index: 0, delta, finish_reason: finish }] });
	let completion = 0;
	if (out.text !== undefined) {
		chunk({ role: "assistant", content: out.text }, null);
		completion = Math.ceil(out.text.length / 4);
		chunk({}, "stop");
	} else if (out.toolCall) {
		const args = JSON.stringify(out.toolCall.args);
		chunk({ role: "assistant", content: null, tool_calls: [{ index: 0, id: `call_${callSeq}`, type: "function", function: { name: out.toolCall.name, arguments: args } }] }, null);
		completion = Math.ceil(args.length / 4) + 5;
		chunk({}, "tool_calls");
	}
	send({ id, object: "chat.completion.chunk", created: 0, model, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion } });
	res.write("data: [DONE]\n\n");
	res.end();
}

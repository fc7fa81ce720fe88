// The host Pi's runtime API: what every release exports, and what only newer ones do. Pi's API
// is imported by the old name (@mariozechner/pi-coding-agent), which Pi 1.x maps to itself.

import type { SessionEntry } from "@earendil-works/pi-coding-agent";
import * as piApi from "@mariozechner/pi-coding-agent";
import { has } from "./rules.ts";
import type { AgentMessage, EntryMessages, Project } from "./validate.ts";

export const host = piApi as unknown as {
	VERSION?: string;
	estimateTokens: (m: AgentMessage) => number;
	getAgentDir: () => string;
	buildSessionProjection?: (entries: SessionEntry[]) => ReturnType<Project>;
	buildContextEntries?: (entries: SessionEntry[]) => SessionEntry[];
	sessionEntryToContextMessages?: (entry: SessionEntry) => AgentMessage[];
};

/** Pi >= 0.87 builds contexts and plans on its projection; older releases on the raw path. */
export const project: Project | undefined =
	typeof host.buildSessionProjection === "function" ? (path) => host.buildSessionProjection?.(path) as ReturnType<Project> : undefined;

/** Pi 0.80.6 .. 0.86: the raw path, with what each entry puts into the context. */
export const entryMessages: EntryMessages | undefined =
	!project && typeof host.buildContextEntries === "function" && typeof host.sessionEntryToContextMessages === "function"
		? {
				contextEntries: (path) => host.buildContextEntries?.(path) ?? path,
				contextMessages: (e) => host.sessionEntryToContextMessages?.(e) ?? [],
				systemMessages: has(host.VERSION, "SystemMessages"),
			}
		: undefined;

/** estimate is Pi's own token estimate of a message. */
export const estimate = (m: AgentMessage) => host.estimateTokens(m);

/** contextKind says how the host Pi builds a context, for the debug line. */
export function contextKind(): string {
	return project ? " (projected contexts)" : entryMessages ? " (entry contexts)" : "";
}

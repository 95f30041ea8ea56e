/**
 * Merging snapshots and live events by revision (SPEC R1, R3). Pure: no DOM, no network.
 *
 * For one session and one kind (its own state, its queue, its cancellation) a larger revision is
 * newer. A client keeps the highest revision it has seen and ignores anything lower; an equal
 * revision is the same state, so the value already held is kept. Snapshots (queries, mutation
 * payloads) and subscription events go through the same door, so a late snapshot can never
 * overwrite a newer event.
 */

export type Kind = "session" | "queue" | "cancellation";

export interface Versioned {
  readonly revision: number;
}

/** Whether `incoming` replaces `current`: only a strictly larger revision does (R3). */
export function isNewer(current: Versioned | undefined, incoming: Versioned): boolean {
  return current === undefined || incoming.revision > current.revision;
}

/** The newest value seen per session and kind; `M` maps each kind to its value type. */
export class RevisionBook<M extends Record<Kind, Versioned>> {
  private readonly latest = new Map<string, Versioned>();

  /** Offer a value; answers whether it was kept (false for an older or equal revision). */
  offer<K extends Kind>(sessionId: string, kind: K, value: M[K]): boolean {
    const key = `${sessionId}\u0000${kind}`;
    if (!isNewer(this.latest.get(key), value)) return false;
    this.latest.set(key, value);
    return true;
  }

  get<K extends Kind>(sessionId: string, kind: K): M[K] | undefined {
    return this.latest.get(`${sessionId}\u0000${kind}`) as M[K] | undefined;
  }

  /** Forget one session (the page closed it); its next values start from scratch. */
  forget(sessionId: string): void {
    for (const key of [...this.latest.keys()]) {
      if (key.startsWith(`${sessionId}\u0000`)) this.latest.delete(key);
    }
  }
}

/**
 * What the Cancel button shows (SPEC §7): from the click until the backend's first newer
 * cancellation value (or the cancel mutation's answer) the page shows an optimistic pending
 * state; after that only the backend's `pending` counts.
 */
export interface OptimisticCancel {
  /** The cancellation revision the page held when the user clicked. */
  readonly clickedAt: number;
}

export function cancellationShown(
  backend: { readonly pending: boolean; readonly revision: number } | undefined,
  optimistic: OptimisticCancel | null,
): { pending: boolean; optimistic: boolean } {
  const backendPending = backend?.pending ?? false;
  const stillOptimistic =
    optimistic !== null && (backend === undefined || backend.revision <= optimistic.clickedAt);
  return {
    pending: backendPending || stillOptimistic,
    optimistic: stillOptimistic && !backendPending,
  };
}

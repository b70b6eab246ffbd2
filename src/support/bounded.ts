/** Promise helpers for deadlines that must never hang a shutdown. */

/** true when `promise` settled within `ms`. */
export async function bounded(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const done = promise.then(
    () => true,
    () => true,
  );
  const result = await Promise.race([done, timeout]);
  clearTimeout(timer);
  return result;
}

/**
 * The logging the gateway needs: the `(object, message)` form of pino, so a
 * pino logger (or a child of one) can be passed as is.
 */
export interface GatewayLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Drops everything: the default when no logger is given. */
export const silentGatewayLogger: GatewayLogger = Object.freeze({
  info() {},
  warn() {},
  error() {},
});

#!/usr/bin/env node
// Node 20 cannot strip TypeScript types: register tsx's loader in this process
// (no child process, so signals reach the worker directly), then run the CLI.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');

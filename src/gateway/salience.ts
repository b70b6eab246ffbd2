/**
 * What the offline summarizer looks for in a sentence: the facts a reader of
 * the summary would later ask about, and whether the sentence is phatic (it
 * keeps the conversation going and says nothing: greetings, thanks, praise,
 * offers of more help). Cheap by design: one pass of a few regular
 * expressions over each sentence, no dictionary beyond the short lists here.
 *
 * Terminology
 * - Fact key: a token of a sentence that names something checkable, lower-
 *   cased so repeats are one key: a figure (a token with a digit: numbers,
 *   dates, times, versions, identifiers; not a bare one- or two-digit count
 *   or list marker, which the grounding check does not count either),
 *   quoted code, a URL, e-mail address or path, or a proper name.
 * - Proper name: a capitalized word that does not start its sentence (`I`
 *   and its contractions, and capitalized function words such as `The`, are
 *   none), or a sentence's first word when the material capitalizes that
 *   word inside a sentence elsewhere (`Nietzsche believed...` after `...by
 *   Nietzsche`).
 * - Phatic: a sentence that opens with a greeting, thanks, an apology, an
 *   offer of more help, a wish or an AI disclaimer and has no fact key after
 *   that opening; or a sentence without a fact key that is a short
 *   acknowledgement or praise (`Sure!`, `That's great.`), or an exclamation
 *   or a question of its own (the reply's question back to the user). English only: in other languages
 *   no sentence is phatic, and facts and centrality choose alone.
 */

/** Letters, digits and the marks inside a word (`O'Brien`, `v2.3.1`, `INV-2024-001`, `e.g`). */
const WORD = /[\p{L}\p{N}](?:[\p{L}\p{N}'’._\-/:@]*[\p{L}\p{N}])?/gu;
const HAS_DIGIT = /\p{N}/u;
/** One or two digits, maybe a list marker's `.` or `)`: a count, not a fact (grounding checks none below 100). */
const SMALL_COUNT = /^\p{N}{1,2}$/u;
const CAPITALIZED = /^\p{Lu}/u;
const FIRST_PERSON = /^I(?:['’](?:m|ve|ll|d|M|VE|LL|D))?$/;
const CODE_SPAN = /`([^`]+)`/g;
const LINK = /^(?:[a-z][a-z0-9+.-]*:\/\/|www\.)|^[^@\s]+@[^@\s]+\.[a-z]{2,}$|\/[\p{L}\p{N}_.-]+\//iu;

/**
 * Capitalized at a sentence start or in a heading only because of where they
 * stand: function words, pronouns and the commonest openers. Never names.
 */
const NOT_NAMES = new Set(
  (
    'a an and are as at be but by can could do does for from had has have he her here his how i if in into is it its ' +
    'let me my no not of on or our she so some than that the their them then there these they this those to was we were ' +
    'what when where which while who why will with would yes you your also however although because each every first ' +
    'finally for example note other overall second third one two many most more just like after before during once ' +
    'please sure yes okay ok thanks thank hello hi hey step example answer question summary conclusion'
  ).split(' '),
);

/** The proper names of a sentence's words other than its first (see Terminology), lower-cased. */
function isName(word: string): boolean {
  return CAPITALIZED.test(word) && !FIRST_PERSON.test(word) && !NOT_NAMES.has(word.toLowerCase());
}

/**
 * The words the material capitalizes inside a sentence, lower-cased: a
 * sentence's first word that is one of them is a name too.
 */
export function namesInside(sentences: readonly string[]): Set<string> {
  const names = new Set<string>();
  for (const s of sentences) {
    let first = true;
    for (const m of s.matchAll(WORD)) {
      if (!first && isName(m[0])) names.add(m[0].toLowerCase());
      first = false;
    }
  }
  return names;
}

/**
 * The fact keys of `sentence` (see Terminology), without repeats. `names`:
 * namesInside() of the material; `start`: whether `sentence` starts a
 * sentence (its first word is then a name only when `names` has it).
 */
export function factKeys(sentence: string, names: ReadonlySet<string>, start = true): string[] {
  const keys = new Set<string>();
  for (const m of sentence.matchAll(CODE_SPAN)) keys.add(`code:${m[1]!.trim()}`);
  let first = start;
  for (const m of sentence.replace(CODE_SPAN, ' ').matchAll(WORD)) {
    const word = m[0];
    const lower = word.toLowerCase();
    if (HAS_DIGIT.test(word)) {
      if (!SMALL_COUNT.test(word)) keys.add(lower);
    } else if (LINK.test(word)) {
      keys.add(lower);
    } else if (first ? names.has(lower) && isName(word) : isName(word)) {
      keys.add(lower);
    }
    first = false;
  }
  return [...keys];
}

/**
 * Openings that make a sentence without a fact phatic whatever follows
 * (after leading markup; lower case, matched as whole words).
 */
const PHATIC_OPENINGS = [
  // greetings, thanks, wishes, apologies
  'hi',
  'hello',
  'hey',
  'greetings',
  'good morning',
  'good afternoon',
  'good evening',
  'thanks',
  'thank you',
  'many thanks',
  "you're welcome",
  'you are welcome',
  'no problem',
  'no worries',
  'my pleasure',
  'anytime',
  'cheers',
  'congratulations',
  'congrats',
  'well done',
  'good job',
  'good luck',
  'best of luck',
  'best wishes',
  'enjoy',
  'have fun',
  'take care',
  'stay safe',
  'have a great',
  'have a nice',
  'have a good',
  'have a wonderful',
  'have a lovely',
  "i'm glad",
  'i am glad',
  "i'm so glad",
  "i'm happy",
  'i am happy',
  "i'm so happy",
  "i'm excited",
  'i am excited',
  "i'm sorry",
  'i am sorry',
  'i apologize',
  'i apologise',
  'my apologies',
  'apologies',
  "i can't wait",
  'i cannot wait',
  "i'd love to",
  'i would love to',
  'glad to',
  'happy to',
  'good question',
  'great question',
  'excellent question',
  'interesting question',
  'what a',
  // offers of more help
  'i hope',
  'hope this',
  'hope that',
  'hope it',
  'hope you',
  'let me know',
  'please let me know',
  'feel free',
  'please feel free',
  "don't hesitate",
  'do not hesitate',
  'please do not hesitate',
  "please don't hesitate",
  'if you have any questions',
  'if you have any other',
  'if you have any further',
  'if you have any more',
  'if you need any',
  'if you need more help',
  'if you need further',
  'if you need help',
  "if you'd like",
  'if you would like',
  'is there anything',
  'anything else',
  'can i help',
  'how can i help',
  'how can i assist',
  'how may i',
  "i'd be happy",
  'i would be happy',
  "i'd be glad",
  "i'm here to",
  'i am here to',
  "i'll be happy",
  'i will be happy',
  'happy to help',
  'glad to help',
  'good to hear',
  'glad to hear',
  // disclaimers
  'as an ai',
  'as a language model',
  'as an artificial',
  "i'm an ai",
  'i am an ai',
  "i'm just an ai",
  'i am just an ai',
  "i don't have personal",
  'i do not have personal',
  "i'm not able to",
  'i am not able to',
  "i'm unable",
  'i am unable',
];
/**
 * Acknowledgements and praise: phatic only in a short sentence (at most
 * ACK_WORDS words) or one that introduces what follows (ends with `:`):
 * `Sure!`, `Great, here is a poem:`; not `Certainly the main reason is cost.`
 */
const ACK_OPENINGS = [
  'sure',
  'certainly',
  'of course',
  'absolutely',
  'definitely',
  'okay',
  'ok',
  'alright',
  'all right',
  'yes',
  'yeah',
  'great',
  'awesome',
  'excellent',
  'wonderful',
  'fantastic',
  'perfect',
  'cool',
  'nice',
  'wow',
  'oh',
  'ah',
  'haha',
  'indeed',
  'exactly',
  'got it',
  'understood',
  'noted',
  'i understand',
  'here is',
  "here's",
  'here are',
  'below is',
  'below are',
];
const ACK_WORDS = 8;
/** Praise of something, phatic in a short sentence as acknowledgements are: `That's great`, `It sounds like a fun trip`. */
const PRAISE =
  /^(?:that|this|it|which|what|how|sounds)(?:['’]s|\s+is|\s+sounds|\s+seems|\s+looks)?(?:\s+like)?(?:\s+(?:so|really|very|such|quite|truly|absolutely|an?|a\s+really|a\s+very))*\s+(?:great|awesome|wonderful|fantastic|amazing|excellent|cool|nice|good|lovely|exciting|interesting|fun|perfect|impressive|brilliant|fascinating|terrific|incredible|delightful|beautiful)(?![\p{L}\p{N}])/iu;

const opening = (list: readonly string[]) =>
  new RegExp(`^(?:${list.map((p) => p.replace(/'/g, "['’]").replace(/ /g, '\\s+')).join('|')})(?![\\p{L}\\p{N}])`, 'iu');
const PHATIC_OPENING = opening(PHATIC_OPENINGS);
const ACK_OPENING = opening(ACK_OPENINGS);
/** Markup and emoji before the first word (`**`, `- `, `> `, `1. `). */
const LEADING_MARKUP = /^[^\p{L}\p{N}]*(?:\p{N}{1,2}[.)]\s+)?[^\p{L}\p{N}]*/u;
const WORDS = /\S+/g;

/**
 * Whether `sentence` is phatic (see Terminology). `facts`: its fact keys;
 * `names`: namesInside() of the material. A phatic opening's own words are
 * no facts (`As an AI language model, ...`): only the facts after it count.
 */
export function isPhatic(sentence: string, facts: readonly string[], names: ReadonlySet<string>): boolean {
  const text = sentence.replace(LEADING_MARKUP, '');
  const opening = PHATIC_OPENING.exec(text);
  if (opening !== null) return facts.length === 0 || factKeys(text.slice(opening[0].length), names, false).length === 0;
  if (facts.length > 0) return false;
  if ((ACK_OPENING.test(text) || PRAISE.test(text)) && ((text.match(WORDS)?.length ?? 0) <= ACK_WORDS || /:[\s*_]*$/.test(text)))
    return true;
  // An exclamation, or a question back to the user, that names nothing: `I can't wait to try it!`, `What do you think?`.
  return /[!?][\s"”'’)*_]*$/u.test(sentence);
}

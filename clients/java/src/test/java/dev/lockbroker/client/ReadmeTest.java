package dev.lockbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The README shows the examples as {@link Examples} has them (which
 * {@link ExamplesTest} runs), and names every conformance scenario's test.
 */
class ReadmeTest {
    private static Path dir() {
        String dir = System.getProperty("lockbroker.java.dir");
        if (dir == null) {
            fail("the system property lockbroker.java.dir (clients/java) is unset: run the suite with clients/java/run-tests");
        }
        return Path.of(dir);
    }

    @Test
    void readmeExamplesAreTheTestedOnes() throws IOException {
        String readme = Files.readString(dir().resolve("README.md"));
        List<String> blocks = new ArrayList<>();
        Matcher block = Pattern.compile("```java\n(.*?)```", Pattern.DOTALL).matcher(readme);
        while (block.find()) {
            blocks.add(dedent(block.group(1)));
        }
        Map<String, String> examples = regions(Files.readString(
                dir().resolve("src/test/java/dev/lockbroker/client/Examples.java")));
        assertEquals(List.of("cron-job", "leader-loop", "campaign", "fenced-write", "session"), new ArrayList<>(examples.keySet()));
        for (Map.Entry<String, String> example : examples.entrySet()) {
            assertTrue(blocks.stream().anyMatch(b -> b.contains(example.getValue())),
                    "README.md shows the example " + example.getKey() + " as Examples.java has it:\n"
                            + example.getValue());
        }
    }

    @Test
    void readmeNamesTheTestOfEveryScenario() throws IOException {
        String readme = Files.readString(dir().resolve("README.md"));
        for (int n = 1; n <= 25; n++) {
            String id = String.format("C%02d", n);
            Matcher row = Pattern.compile("\\| " + id + " [^|]*\\| `(\\w+)#(c" + id.substring(1) + "\\w*)`").matcher(readme);
            assertTrue(row.find(), "README.md's table has a row for " + id);
            Path test = dir().resolve("src/test/java/dev/lockbroker/client/" + row.group(1) + ".java");
            assertTrue(Files.readString(test).contains("void " + row.group(2) + "("),
                    id + ": " + row.group(1) + "#" + row.group(2) + " exists");
        }
    }

    /** The regions between {@code // README: name} and {@code // README: end}, dedented. */
    private static Map<String, String> regions(String source) {
        Map<String, String> regions = new LinkedHashMap<>();
        Matcher region = Pattern.compile("// README: ([\\w-]+)\n(.*?)\\s*// README: end", Pattern.DOTALL)
                .matcher(source);
        while (region.find()) {
            regions.put(region.group(1), dedent(region.group(2)));
        }
        return regions;
    }

    /** {@code text} without the indentation its lines share, and without trailing blank lines. */
    private static String dedent(String text) {
        String[] lines = text.split("\n", -1);
        int indent = Integer.MAX_VALUE;
        for (String line : lines) {
            if (!line.isBlank()) {
                indent = Math.min(indent, line.length() - line.stripLeading().length());
            }
        }
        StringBuilder out = new StringBuilder();
        for (String line : lines) {
            out.append(line.isBlank() ? "" : line.substring(indent)).append('\n');
        }
        return out.toString().strip();
    }
}

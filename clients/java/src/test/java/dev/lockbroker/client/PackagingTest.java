package dev.lockbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * The pom.xml a Maven user builds with says what this code is: its version
 * is {@link LockbrokerClient#VERSION}, its licence the project's, its
 * release Java 17, and it has no runtime dependency.
 */
class PackagingTest {
    @Test
    void pomDescribesThisClient() throws Exception {
        String dir = System.getProperty("lockbroker.java.dir");
        if (dir == null) {
            fail("the system property lockbroker.java.dir (clients/java) is unset: run the suite with clients/java/run-tests");
        }
        DocumentBuilderFactory factory = DocumentBuilderFactory.newInstance();
        factory.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        Document pom = factory.newDocumentBuilder().parse(Path.of(dir, "pom.xml").toFile());
        Element project = pom.getDocumentElement();
        assertEquals("dev.lockbroker", child(project, "groupId"));
        assertEquals("lockbroker-client", child(project, "artifactId"));
        assertEquals(LockbrokerClient.VERSION, child(project, "version"), "the pom's version is the client's");
        assertEquals("Apache-2.0", text(project, "licenses/license/name"));
        assertEquals("17", text(project, "properties/maven.compiler.release"));
        NodeList dependencies = project.getElementsByTagName("dependency");
        for (int i = 0; i < dependencies.getLength(); i++) {
            Element dependency = (Element) dependencies.item(i);
            assertEquals("test", child(dependency, "scope"),
                    "no runtime dependency: " + child(dependency, "artifactId"));
        }
        assertTrue(Transport.USER_AGENT.endsWith("/" + LockbrokerClient.VERSION));
    }

    private static String child(Element parent, String name) {
        NodeList nodes = parent.getChildNodes();
        for (int i = 0; i < nodes.getLength(); i++) {
            if (nodes.item(i) instanceof Element && nodes.item(i).getNodeName().equals(name)) {
                return nodes.item(i).getTextContent().trim();
            }
        }
        return null;
    }

    private static String text(Element root, String path) {
        Element at = root;
        for (String name : path.split("/")) {
            Element next = null;
            NodeList nodes = at.getChildNodes();
            for (int i = 0; i < nodes.getLength() && next == null; i++) {
                if (nodes.item(i) instanceof Element && nodes.item(i).getNodeName().equals(name)) {
                    next = (Element) nodes.item(i);
                }
            }
            if (next == null) {
                return null;
            }
            at = next;
        }
        return at.getTextContent().trim();
    }
}
